"""The trust kvselect signs and verifies under, read from settings each time.

- Trust roots: the CA certificates in KVSELECT_TRUST_ROOTS, plus the development CA under
  KVSELECT_DEV_CA_DIR when one was issued (`issue-dev-certs`, the demo). Every certificate it
  issues is flagged "development certificate - not for procurement" wherever it appears.
- Revocation data embedded in each signature for long-term validation (PAdES B-LT): the CRLs in
  KVSELECT_CRLS plus the development CA's; fetched from the CAs only when
  KVSELECT_REVOCATION_FETCH is on.
- Timestamps (PAdES B-T): an RFC 3161 TSA at KVSELECT_TSA_URL; "dev" is the development TSA,
  in-process.
- The organisational seal: a record's "seal" field may only be signed with one of the certificates
  in KVSELECT_SEAL_CERTIFICATES (plus the development seal `issue-dev-certs` writes, flagged as
  development); never with a person's certificate, so nobody can seal a record with a certificate
  issued on their profile.
- Issuing owner certificates: only the development CA, when its key is present.
- How owners sign: on their own machine (kvselect-sign: a token or a local PKCS#12, the CMS is
  uploaded), with a key the organisation holds in an HSM (KVSELECT_PKCS11_MODULE, KVSELECT_HSM_KEYS),
  or - only while every configured root is the development CA's - by uploading a PKCS#12.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.conf import settings

from selection.certificates import signing


def dev_ca_dir() -> Path:
    return Path(settings.KVSELECT_DEV_CA_DIR)


def _read(paths: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in paths if p.is_file()]


def trust_roots() -> list[bytes]:
    """CA certificates trusted for signing and verification (configured roots, then the dev CA)."""
    return _read([Path(p) for p in settings.KVSELECT_TRUST_ROOTS] + [dev_ca_dir() / signing.DEV_CA_CERT])


def crls() -> list[bytes]:
    return _read([Path(p) for p in settings.KVSELECT_CRLS] + [dev_ca_dir() / signing.DEV_CA_CRL])


def seal_certificates() -> list[bytes]:
    """The organisational seal certificates (KVSELECT_SEAL_CERTIFICATES, then the development seal if issued)."""
    return _read([Path(p) for p in settings.KVSELECT_SEAL_CERTIFICATES] + [dev_ca_dir() / signing.DEV_SEAL_CERT])


def certification_refusal(
    certificate: bytes, intermediates: list[bytes] = ()
) -> tuple[signing.CertificateInfo | None, str]:
    """The trust root certifying ``certificate`` for signing now, checked against the configured CRLs, and
    why it cannot sign ("" when it can): revoked (when and why), or certified by no configured root."""
    try:
        root = signing.trust_root_of(
            certificate, trust_roots(), intermediates, crls(), allow_fetching=settings.KVSELECT_REVOCATION_FETCH
        )
    except signing.SigningError as exc:
        return None, str(exc).removeprefix("certificate: ")
    if root is None:
        return None, (
            "not certified for signing by a trust root kvselect is configured with "
            "(KVSELECT_TRUST_ROOTS or the development CA): signatures with it would not verify as trusted"
        )
    return root, ""


def validation_material() -> signing.ValidationMaterial:
    """What each signature embeds so the record verifies offline later (PAdES B-LT)."""
    return signing.ValidationMaterial(trust_roots(), crls(), allow_fetching=settings.KVSELECT_REVOCATION_FETCH)


def timestamper():
    """The RFC 3161 time-stamping client signatures use, or None (no KVSELECT_TSA_URL: PAdES B-B)."""
    url = (settings.KVSELECT_TSA_URL or "").strip()
    if not url:
        return None
    if url == "dev":
        return signing.dev_timestamper(dev_ca_dir())
    return signing.http_timestamper(url)


def issuing_ca_dir() -> Path | None:
    """The CA that can issue an owner's certificate on their profile: the development CA, if its key is here."""
    folder = dev_ca_dir()
    return folder if (folder / signing.DEV_CA_KEY).is_file() and (folder / signing.DEV_CA_CERT).is_file() else None


def production_roots() -> list[signing.CertificateInfo]:
    """The configured trust roots (KVSELECT_TRUST_ROOTS) that are not a kvselect development CA."""
    roots = [signing.certificate_info(data) for data in _read([Path(p) for p in settings.KVSELECT_TRUST_ROOTS])]
    return [root for root in roots if not root.development]


def pkcs12_upload_refusal() -> str | None:
    """Why a PKCS#12 upload is refused here, or None: it is a development convenience, refused as soon as
    a non-development trust root is configured (a real key would then travel through the server)."""
    roots = production_roots()
    if not roots:
        return None
    names = ", ".join(root.common_name or root.subject for root in roots)
    return (
        f"Uploading a PKCS#12 (private key and passphrase) is only for the development CA; this server trusts "
        f"{names} (KVSELECT_TRUST_ROOTS), so keys stay with their owners: sign with kvselect-sign (token or "
        "local PKCS#12) and upload the signature, or with your organisation's HSM."
    )


class HsmConfigurationError(ValueError):
    """KVSELECT_HSM_KEYS cannot be read; the message names the setting and the problem."""


def hsm_key_for(username: str) -> signing.Pkcs11Key | None:
    """The HSM key configured for ``username`` (KVSELECT_HSM_KEYS), or None when the owner has none."""
    raw = (settings.KVSELECT_HSM_KEYS or "").strip()
    if not raw:
        return None
    try:
        keys = json.loads(raw)
    except ValueError as exc:
        raise HsmConfigurationError(f"KVSELECT_HSM_KEYS: not JSON ({exc})") from exc
    entry = keys.get(username) if isinstance(keys, dict) else None
    if entry is None:
        return None
    module = entry.get("module") or settings.KVSELECT_PKCS11_MODULE
    if not module or not entry.get("key") or not (entry.get("token") or entry.get("slot") is not None):
        raise HsmConfigurationError(
            f"KVSELECT_HSM_KEYS[{username!r}]: needs a key label (key), a token label (token) or slot number "
            "(slot), and a module (module or KVSELECT_PKCS11_MODULE)"
        )
    return signing.Pkcs11Key(
        module=module,
        key_label=str(entry["key"]),
        token_label=entry.get("token"),
        slot=int(entry["slot"]) if entry.get("slot") is not None else None,
        cert_label=entry.get("cert"),
    )
