"""The kvselect-sign command: read (or fetch) what to sign, sign it with a token or a local PKCS#12,
write (or upload) the CMS.

kvselect's server prepared the record revision and the CMS signed attributes over its /ByteRange
digest (pyHanko's interrupted signing); here pyHanko's signer for the key builds the CMS over those
attributes unchanged. This package is installed on its own (the kvselect server offers it as a wheel,
or pip install ./clients/kvselect-sign), so it holds the few lines of pyHanko it needs instead of
importing kvselect.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import getpass
import hashlib
import json
import os
import sys
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from asn1crypto import cms
from pyhanko.sign import signers
from pyhanko.sign.general import find_unique_cms_attribute

MD_ALGORITHM = "sha256"


class SignError(Exception):
    """What went wrong, in words for the owner; the command exits 1 with it."""


def _secret(env: str, prompt: str) -> str:
    value = os.environ.get(env)
    return value if value is not None else getpass.getpass(prompt)


@contextmanager
def open_signer(args: argparse.Namespace) -> Iterator[signers.Signer]:
    """The pyHanko signer for the key the options name (a local PKCS#12 or a PKCS#11 token)."""
    if args.pkcs12:
        passphrase = _secret("KVSELECT_PKCS12_PASSPHRASE", f"Passphrase of {args.pkcs12}: ")
        try:
            data = Path(args.pkcs12).read_bytes()
            signer = signers.SimpleSigner.load_pkcs12_data(data, other_certs=(), passphrase=passphrase.encode())
        except OSError as exc:
            raise SignError(f"--pkcs12: cannot read {args.pkcs12} ({exc.strerror})") from exc
        except Exception as exc:
            raise SignError(
                f"--pkcs12: cannot open {args.pkcs12}: wrong passphrase or not a PKCS#12 with a key"
            ) from exc
        if signer is None or signer.signing_cert is None:
            raise SignError(f"--pkcs12: {args.pkcs12} holds no usable key and certificate")
        yield signer
        return
    try:  # the [pkcs11] extra
        from pkcs11.exceptions import PinIncorrect, PinLenRange
        from pyhanko.config.pkcs11 import TokenCriteria
        from pyhanko.sign.pkcs11 import PKCS11Signer, open_pkcs11_session
    except ImportError as exc:
        raise SignError("--pkcs11-module: install the token support: pip install 'kvselect-sign[pkcs11]'") from exc
    pin = _secret("KVSELECT_PIN", f"PIN of the token ({args.token_label or f'slot {args.slot}'}): ")
    criteria = TokenCriteria(label=args.token_label) if args.token_label else None
    try:
        session = open_pkcs11_session(args.pkcs11_module, slot_no=args.slot, token_criteria=criteria, user_pin=pin)
    except (PinIncorrect, PinLenRange) as exc:
        raise SignError("the token refused the PIN (wrong PIN): nothing was signed") from exc
    except Exception as exc:
        raise SignError(f"--pkcs11-module: cannot open the token ({type(exc).__name__}: {exc})") from exc
    try:
        try:
            signer = PKCS11Signer(
                session,
                key_label=args.key_label,
                cert_label=args.cert_label or args.key_label,
                use_raw_mechanism=True,  # hash here, sign on the token: what every token offers
            )
            signer.signing_cert  # noqa: B018 - fetch it now: a missing key or certificate fails here
        except Exception as exc:
            raise SignError(f"--key-label: {args.key_label!r} on the token: {exc}") from exc
        yield signer
    finally:
        session.close()


def check_request(request: dict) -> cms.CMSAttributes:
    """The signed attributes of a signature request, checked to commit to its document digest."""
    try:
        attributes = cms.CMSAttributes.load(base64.b64decode(request["signed_attributes"]))
        digest = bytes(find_unique_cms_attribute(attributes, "message_digest").native)
    except Exception as exc:
        raise SignError("the request holds no CMS signed attributes with a messageDigest") from exc
    if digest.hex() != str(request.get("document_digest", "")).lower():
        raise SignError("the signed attributes do not commit to the request's document digest: refusing to sign")
    return attributes


def sign_request(request: dict, signer: signers.Signer) -> bytes:
    """The CMS (DER) over the request's signed attributes, with ``signer``'s key."""
    attributes = check_request(request)
    mine = hashlib.sha256(signer.signing_cert.dump()).hexdigest()
    expected = str(request.get("certificate_sha256", "")).lower()
    if expected and mine != expected:
        raise SignError(
            f"this key's certificate (SHA-256 {mine[:16]}…) is not the one the record names for you "
            f"(SHA-256 {expected[:16]}…): use your enrolled key"
        )
    try:
        content = asyncio.run(signer.async_sign_prescribed_attributes(MD_ALGORITHM, attributes))
    except Exception as exc:
        raise SignError(f"signing failed ({type(exc).__name__}: {exc})") from exc
    return content.dump()


def _call(url: str, token: str, payload: dict) -> dict:
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Token {token}", "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise SignError(f"{url}: {exc.code} {exc.read().decode(errors='replace')[:2000]}") from exc
    except urllib.error.URLError as exc:
        raise SignError(f"{url}: {exc.reason}") from exc


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kvselect-sign", description=__doc__.splitlines()[0])
    source = parser.add_argument_group("what to sign")
    source.add_argument("--request", help="the signature request JSON the record page offers")
    source.add_argument("--url", help="kvselect's base URL: prepare and upload through the API (KVSELECT_API_TOKEN)")
    source.add_argument("--record", type=int, help="with --url: the record's id")
    source.add_argument("--role", choices=["business", "platform", "security"], help="with --url: your role")
    key = parser.add_argument_group("the key (one of)")
    key.add_argument("--pkcs12", help="a local PKCS#12 file (passphrase: KVSELECT_PKCS12_PASSPHRASE or asked)")
    key.add_argument("--pkcs11-module", help="the token's PKCS#11 module (PIN: KVSELECT_PIN or asked)")
    key.add_argument("--token-label", help="with --pkcs11-module: the token, by label")
    key.add_argument("--slot", type=int, help="with --pkcs11-module: the token, by slot number")
    key.add_argument("--key-label", help="with --pkcs11-module: the signing key's label")
    key.add_argument("--cert-label", help="with --pkcs11-module: the certificate's label (default: the key's)")
    parser.add_argument("--out", help="write the CMS here (.p7s) instead of uploading it")
    args = parser.parse_args(argv)
    if bool(args.request) == bool(args.url):
        parser.error("give --request FILE or --url URL (with --record and --role)")
    if args.url and (args.record is None or not args.role):
        parser.error("--url needs --record and --role")
    if args.request and not args.out:
        parser.error("--request needs --out (upload the .p7s on the record page)")
    if bool(args.pkcs12) == bool(args.pkcs11_module):
        parser.error("give --pkcs12 FILE or --pkcs11-module PATH")
    if args.pkcs11_module and not args.key_label:
        parser.error("--pkcs11-module needs --key-label (and --token-label or --slot)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.request:
            request = json.loads(Path(args.request).read_text(encoding="utf-8"))
        else:
            token = os.environ.get("KVSELECT_API_TOKEN") or _secret("KVSELECT_API_TOKEN", "kvselect API token: ")
            base = f"{args.url.rstrip('/')}/api/v1/records/{args.record}"
            request = _call(f"{base}/signature-request/", token, {"role": args.role})
        with open_signer(args) as signer:
            signature = sign_request(request, signer)
        if args.out:
            Path(args.out).write_bytes(signature)
            print(f"wrote {args.out} ({len(signature)} bytes): upload it on the record page")
        else:
            record = _call(
                f"{base}/signature/", token, {"role": args.role, "cms": base64.b64encode(signature).decode()}
            )
            print(
                f"signed record {record.get('id')} v{record.get('version')} as {args.role} owner: "
                f"{record.get('status')}"
            )
    except (OSError, ValueError, SignError) as exc:
        print(f"kvselect-sign: {exc}", file=sys.stderr)
        return 1
    return 0
