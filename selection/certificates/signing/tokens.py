"""PKCS#11 tokens and HSMs: a key on a token as a pyHanko signer."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pkcs11.exceptions import PinIncorrect, PinLenRange, PKCS11Error
from pyhanko.config.pkcs11 import TokenCriteria
from pyhanko.sign import signers
from pyhanko.sign.pkcs11 import PKCS11Signer, open_pkcs11_session

from selection.certificates.signing.base import SigningError
from selection.certificates.signing.certificates import load_asn1_cert


@dataclass(frozen=True)
class Pkcs11Key:
    """Where a signing key lives on a PKCS#11 token (smart card, YubiKey, HSM, SoftHSM). Nothing secret:
    the PIN is given each time the key is used."""

    module: str  # path to the PKCS#11 module (.so), e.g. /usr/lib/softhsm/libsofthsm2.so
    key_label: str
    token_label: str | None = None  # the token to use, by label ...
    slot: int | None = None  # ... or by slot number
    cert_label: str | None = None  # the certificate object on the token; default: the key's label


@contextmanager
def pkcs11_session(key: Pkcs11Key, pin: str | None, certificate: bytes | None = None) -> Iterator[signers.Signer]:
    """A pyHanko signer for ``key``, logged in with ``pin``; the session is closed on exit.

    ``certificate`` (PEM or DER) is the signer's certificate when the token holds only the key;
    otherwise it is read from the token (``cert_label``, default the key's label). A wrong PIN, a
    missing module, token or key is a SigningError naming ``pin``, ``module``, ``token`` or ``key_label``.
    """
    if not Path(key.module).is_file():
        raise SigningError(f"module: no PKCS#11 module at {key.module}")
    criteria = TokenCriteria(label=key.token_label) if key.token_label else None
    try:
        session = open_pkcs11_session(key.module, slot_no=key.slot, token_criteria=criteria, user_pin=pin)
    except (PinIncorrect, PinLenRange) as exc:
        raise SigningError("pin: the token refused the PIN (wrong PIN): nothing was signed") from exc
    except PKCS11Error as exc:
        where = f"label {key.token_label!r}" if key.token_label else f"slot {key.slot}"
        raise SigningError(
            f"token: cannot open the token with {where} in {key.module} ({type(exc).__name__}: {exc})"
        ) from exc
    except Exception as exc:  # pyHanko's own "no token matching" error and the module loader's
        where = f"label {key.token_label!r}" if key.token_label else f"slot {key.slot}"
        raise SigningError(f"token: no usable token with {where} in {key.module} ({exc})") from exc
    try:
        try:
            signer = PKCS11Signer(
                session,
                key_label=key.key_label,
                cert_label=key.cert_label or key.key_label,
                signing_cert=load_asn1_cert(certificate) if certificate else None,
                # hash here, sign the digest on the token (CKM_ECDSA, CKM_RSA_PKCS): what every token
                # offers; SoftHSM2 and many cards lack the combined CKM_ECDSA_SHA256
                use_raw_mechanism=True,
            )
            if signer.signing_cert is None:
                raise SigningError(f"key_label: no certificate on the token for key {key.key_label!r}")
        except SigningError:
            raise
        except Exception as exc:  # the key or certificate object is missing, or ambiguous
            raise SigningError(f"key_label: {key.key_label!r} on the token: {exc}") from exc
        yield signer
    finally:
        session.close()
