"""A real PKCS#11 token for tests: a fresh SoftHSM2 token (Debian `softhsm2`, installed by
scripts/install-system-deps.sh) holding a development CA key and its certificate.

Each call initialises its own token directory (SOFTHSM2_CONF points at it) and re-initialises the
module in this process, so the token a test signs with is the one it created.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pkcs11
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from pkcs11.constants import Attribute, CertificateType, ObjectClass

from selection.certificates.signing import Pkcs11Key

SOFTHSM_MODULE = "/usr/lib/softhsm/libsofthsm2.so"
PIN = "4321"
SO_PIN = "87654321"


def softhsm_token(folder: Path, pkcs12_bytes: bytes, passphrase: str, *, token_label="owner-token", key_label="owner"):
    """Initialise a SoftHSM2 token under ``folder`` with the key and certificate of a PKCS#12; its Pkcs11Key.

    Sets SOFTHSM2_CONF for this process and its children (the caller restores it: monkeypatch)."""
    tokens = folder / "tokens"
    tokens.mkdir(parents=True, exist_ok=True)
    conf = folder / "softhsm2.conf"
    conf.write_text(f"directories.tokendir = {tokens}\nobjectstore.backend = file\nlog.level = ERROR\n")
    os.environ["SOFTHSM2_CONF"] = str(conf)
    util = ["softhsm2-util"]
    subprocess.run(
        [*util, "--init-token", "--free", "--label", token_label, "--pin", PIN, "--so-pin", SO_PIN],
        check=True,
        capture_output=True,
    )
    key, cert, _chain = pkcs12.load_key_and_certificates(pkcs12_bytes, passphrase.encode())
    key_file = folder / "key.pem"
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    subprocess.run(
        [*util, "--import", str(key_file), "--token", token_label, "--label", key_label, "--id", "01", "--pin", PIN],
        check=True,
        capture_output=True,
    )
    key_file.unlink()
    lib = pkcs11.lib(SOFTHSM_MODULE)
    lib.reinitialize()  # SoftHSM reads SOFTHSM2_CONF when the module is initialised
    with lib.get_token(token_label=token_label).open(rw=True, user_pin=PIN) as session:
        session.create_object(
            {
                Attribute.CLASS: ObjectClass.CERTIFICATE,
                Attribute.CERTIFICATE_TYPE: CertificateType.X_509,
                Attribute.TOKEN: True,
                Attribute.LABEL: key_label,
                Attribute.ID: b"\x01",
                Attribute.SUBJECT: cert.subject.public_bytes(),
                Attribute.VALUE: cert.public_bytes(serialization.Encoding.DER),
            }
        )
    return Pkcs11Key(module=SOFTHSM_MODULE, token_label=token_label, key_label=key_label)
