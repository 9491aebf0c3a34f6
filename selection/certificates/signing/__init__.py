"""PAdES signing and verification of decision-record PDFs, and a development CA.

This is the ONLY package that imports pyHanko (pinned to 0.38.* in pyproject.toml): everything
pyHanko-specific stays behind the pure functions below so an upgrade touches one package.

- ``certificate_info``, ``pkcs12_certificate`` and ``trust_root_of`` read a certificate's public
  facts (the SHA-256 fingerprint each signature field is checked against) and which trust root
  certifies it: what an owner's enrolment stores.
- ``prepare_signature_fields`` adds empty, visible signature fields at the boxes the record
  template laid out (one incremental update), so each owner signs an existing field by name.
- ``sign_pdf`` appends one PAdES baseline signature (subfilter ETSI.CAdES.detached) as an
  incremental update with a visible box showing "signed", the role, the signer and the time; it
  refuses a key whose certificate is not the expected (enrolled) one. B-B by default; B-T with an
  RFC 3161 timestamp, B-LT with the chain and revocation data in the document's DSS. Owners sign
  in sequence (business, platform, security), an organisational seal last.
- ``verify_pdf`` reports every signature, offline: intact, valid, trusted and by which root (a
  development CA flagged), signed by the owner named for its field, the coverage / modification
  level, the PAdES level reached, and the document's SHA-256. The modification analysis is
  pyHanko's in linear time (see "modification analysis" below), and stricter about metadata: after
  a signature, only the modification dates and the producer may change.
- ``issue_dev_certificates`` creates a clearly-labelled development CA (with its CRL and a
  development time-stamping authority) and one PKCS#12 per owner; ``issue_certificate`` issues
  one more from it (never for production).

The package is split by concern. Import the public names from here (this file lists them and
re-exports no private name), or from the module that defines them:

* `base`: shared names and `SigningError`; `certificates`: a certificate's facts, its trust root, a
  PKCS#12 signer; `sign`: fields, stamps, `sign_pdf`, timestamps; `fonts`: the stamp's
  CJK face, parsed once per process; `tokens`: PKCS#11 keys; `owner`:
  owner-side (interrupted) signing; `modifications`: the modification analysis; `reports`: what
  verification reports; `verification`: `verify_pdf`, revision by revision; `dev_ca`: the development CA.

Importing this package loads nothing: each public name is resolved from its module on first use
(PEP 562), so a module that only mentions ``signing.verify_pdf`` inside a function does not pull
pyHanko, fontTools and HarfBuzz into every web process and ``manage.py`` command (issue 39). Code that
needs a name at import time imports it from its module, which loads what that module needs.
"""

from __future__ import annotations

import importlib

# Each public name and the module (under this package) that defines it.
_HOME = {
    # base
    "ALLOWED_AFTER_LAST": "base",
    "ALLOWED_LATER_CHANGES": "base",
    "Box": "base",
    "DEV_CA_COMMON_NAME": "base",
    "DEV_ORGANISATION": "base",
    "DEV_TSA_COMMON_NAME": "base",
    "MD_ALGORITHM": "base",
    "SEAL_FIELD": "base",
    "SigningError": "base",
    "refusal": "base",
    # certificates
    "CertificateInfo": "certificates",
    "anchor_info": "certificates",
    "bundle_certificates": "certificates",
    "certificate_info": "certificates",
    "info_of": "certificates",
    "load_asn1_cert": "certificates",
    "load_asn1_crl": "certificates",
    "load_signer": "certificates",
    "pkcs12_certificate": "certificates",
    "run_coroutine": "certificates",
    "subject_line": "certificates",
    "trust_root_of": "certificates",
    # dev_ca
    "DEV_CA_CERT": "dev_ca",
    "DEV_CA_CRL": "dev_ca",
    "DEV_CA_KEY": "dev_ca",
    "DEV_CRL_URL": "dev_ca",
    "DEV_SEAL_CERT": "dev_ca",
    "DEV_TSA_CERT": "dev_ca",
    "DEV_TSA_KEY": "dev_ca",
    "DevCertificatePaths": "dev_ca",
    "issue_certificate": "dev_ca",
    "issue_dev_certificates": "dev_ca",
    "leaf_certificate": "dev_ca",
    # fonts
    "CJK_COLLECTIONS": "fonts",
    "CJK_FACE": "fonts",
    "cjk_stamp_font": "fonts",
    "font_covers": "fonts",
    "stamp_font_engine": "fonts",
    # modifications
    "DIFF_POLICY": "modifications",
    "FIRST_SIGNATURE_POLICY": "modifications",
    "MUTABLE_INFO_KEYS": "modifications",
    "MUTABLE_XMP_PROPERTIES": "modifications",
    "ObjStmIndexReader": "modifications",
    "StrictDocInfoRule": "modifications",
    "StrictMetadataRule": "modifications",
    "UsagesOfRef": "modifications",
    "in_revision": "modifications",
    "install_on_demand_usages": "modifications",
    # owner
    "PreparedSignature": "owner",
    "RESERVED_SIGNATURE_BYTES": "owner",
    "check_owner_signature": "owner",
    "check_prepared_revision": "owner",
    "finish_owner_signature": "owner",
    "message_digest_of": "owner",
    "prepare_owner_signature": "owner",
    "sign_attributes": "owner",
    # reports
    "ExpectedSigner": "reports",
    "PADES_SUBFILTER": "reports",
    "RecordPolicy": "reports",
    "SignatureReport": "reports",
    "VerificationReport": "reports",
    "describe_finding": "reports",
    "failed_report": "reports",
    "read_security_store": "reports",
    "signature_report": "reports",
    "validation_context_for": "reports",
    # sign
    "CERTIFICATION_PERMISSION": "sign",
    "ValidationMaterial": "sign",
    "add_document_timestamp": "sign",
    "STAMP_HEADING": "sign",
    "StampWords": "sign",
    "dev_timestamper": "sign",
    "existing_signature_fields": "sign",
    "http_timestamper": "sign",
    "open_writer": "sign",
    "prepare_signature_fields": "sign",
    "sign_pdf": "sign",
    "sign_pdf_with": "sign",
    "signature_setup": "sign",
    # tokens
    "Pkcs11Key": "tokens",
    "pkcs11_session": "tokens",
    # verification
    "account_for_revisions": "verification",
    "verify_pdf": "verification",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    """The public `name` from its module, imported now (and then kept here, like an eager import)."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
