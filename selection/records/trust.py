"""The trust kvselect signs and verifies under, read from settings each time.

- Trust roots: the CA certificates in KVSELECT_TRUST_ROOTS, plus the development CA under
  KVSELECT_DEV_CA_DIR when one was issued (`issue-dev-certs`, the demo). Every certificate it
  issues is flagged "development certificate - not for procurement" wherever it appears.
- Revocation data embedded in each signature for long-term validation (PAdES B-LT): the CRLs in
  KVSELECT_CRLS plus the development CA's; fetched from the CAs only when
  KVSELECT_REVOCATION_FETCH is on.
- Timestamps (PAdES B-T): an RFC 3161 TSA at KVSELECT_TSA_URL; "dev" is the development TSA,
  in-process.
- Issuing owner certificates: only the development CA, when its key is present.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from selection.records import signing


def dev_ca_dir() -> Path:
    return Path(settings.KVSELECT_DEV_CA_DIR)


def _read(paths: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in paths if p.is_file()]


def trust_roots() -> list[bytes]:
    """CA certificates trusted for signing and verification (configured roots, then the dev CA)."""
    return _read([Path(p) for p in settings.KVSELECT_TRUST_ROOTS] + [dev_ca_dir() / signing.DEV_CA_CERT])


def crls() -> list[bytes]:
    return _read([Path(p) for p in settings.KVSELECT_CRLS] + [dev_ca_dir() / signing.DEV_CA_CRL])


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
