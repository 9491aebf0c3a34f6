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
  PKCS#12 signer; `sign`: fields, stamps, `sign_pdf`, timestamps; `tokens`: PKCS#11 keys; `owner`:
  owner-side (interrupted) signing; `modifications`: the modification analysis; `reports`: what
  verification reports; `verification`: `verify_pdf`, revision by revision; `dev_ca`: the development CA.
"""

from selection.certificates.signing.base import (
    ALLOWED_AFTER_LAST,
    ALLOWED_LATER_CHANGES,
    CERTIFICATION_PERMISSION,
    DEV_CA_COMMON_NAME,
    DEV_ORGANISATION,
    DEV_TSA_COMMON_NAME,
    MD_ALGORITHM,
    SEAL_FIELD,
    Box,
    SigningError,
    refusal,
)
from selection.certificates.signing.certificates import (
    CertificateInfo,
    anchor_info,
    bundle_certificates,
    certificate_info,
    info_of,
    load_asn1_cert,
    load_asn1_crl,
    load_signer,
    pkcs12_certificate,
    run_coroutine,
    subject_line,
    trust_root_of,
)
from selection.certificates.signing.dev_ca import (
    DEV_CA_CERT,
    DEV_CA_CRL,
    DEV_CA_KEY,
    DEV_CRL_URL,
    DEV_SEAL_CERT,
    DEV_TSA_CERT,
    DEV_TSA_KEY,
    DevCertificatePaths,
    issue_certificate,
    issue_dev_certificates,
    leaf_certificate,
)
from selection.certificates.signing.modifications import (
    DIFF_POLICY,
    FIRST_SIGNATURE_POLICY,
    MUTABLE_INFO_KEYS,
    MUTABLE_XMP_PROPERTIES,
    ObjStmIndexReader,
    StrictDocInfoRule,
    StrictMetadataRule,
    UsagesOfRef,
    in_revision,
    install_on_demand_usages,
)
from selection.certificates.signing.owner import (
    RESERVED_SIGNATURE_BYTES,
    PreparedSignature,
    check_owner_signature,
    check_prepared_revision,
    finish_owner_signature,
    message_digest_of,
    prepare_owner_signature,
    sign_attributes,
)
from selection.certificates.signing.reports import (
    PADES_SUBFILTER,
    ExpectedSigner,
    RecordPolicy,
    SignatureReport,
    VerificationReport,
    describe_finding,
    failed_report,
    read_security_store,
    signature_report,
    validation_context_for,
)
from selection.certificates.signing.sign import (
    CJK_COLLECTIONS,
    CJK_FACE,
    STAMP_HEADING,
    StampWords,
    ValidationMaterial,
    add_document_timestamp,
    cjk_stamp_font,
    dev_timestamper,
    existing_signature_fields,
    http_timestamper,
    open_writer,
    prepare_signature_fields,
    sign_pdf,
    sign_pdf_with,
    signature_setup,
)
from selection.certificates.signing.tokens import (
    Pkcs11Key,
    pkcs11_session,
)
from selection.certificates.signing.verification import (
    account_for_revisions,
    verify_pdf,
)

__all__ = [
    "ALLOWED_AFTER_LAST",
    "ALLOWED_LATER_CHANGES",
    "Box",
    "CERTIFICATION_PERMISSION",
    "CJK_COLLECTIONS",
    "CJK_FACE",
    "CertificateInfo",
    "STAMP_HEADING",
    "StampWords",
    "DEV_CA_CERT",
    "DEV_CA_COMMON_NAME",
    "DEV_CA_CRL",
    "DEV_CA_KEY",
    "DEV_CRL_URL",
    "DEV_ORGANISATION",
    "DEV_SEAL_CERT",
    "DEV_TSA_CERT",
    "DEV_TSA_COMMON_NAME",
    "DEV_TSA_KEY",
    "DIFF_POLICY",
    "DevCertificatePaths",
    "ExpectedSigner",
    "FIRST_SIGNATURE_POLICY",
    "MD_ALGORITHM",
    "MUTABLE_INFO_KEYS",
    "MUTABLE_XMP_PROPERTIES",
    "ObjStmIndexReader",
    "PADES_SUBFILTER",
    "Pkcs11Key",
    "PreparedSignature",
    "RESERVED_SIGNATURE_BYTES",
    "RecordPolicy",
    "SEAL_FIELD",
    "SignatureReport",
    "SigningError",
    "StrictDocInfoRule",
    "StrictMetadataRule",
    "UsagesOfRef",
    "ValidationMaterial",
    "VerificationReport",
    "account_for_revisions",
    "add_document_timestamp",
    "anchor_info",
    "bundle_certificates",
    "certificate_info",
    "check_owner_signature",
    "check_prepared_revision",
    "cjk_stamp_font",
    "describe_finding",
    "dev_timestamper",
    "existing_signature_fields",
    "failed_report",
    "finish_owner_signature",
    "http_timestamper",
    "in_revision",
    "info_of",
    "install_on_demand_usages",
    "issue_certificate",
    "issue_dev_certificates",
    "leaf_certificate",
    "load_asn1_cert",
    "load_asn1_crl",
    "load_signer",
    "message_digest_of",
    "open_writer",
    "pkcs11_session",
    "pkcs12_certificate",
    "prepare_owner_signature",
    "prepare_signature_fields",
    "refusal",
    "read_security_store",
    "run_coroutine",
    "sign_attributes",
    "sign_pdf",
    "sign_pdf_with",
    "signature_report",
    "signature_setup",
    "subject_line",
    "trust_root_of",
    "validation_context_for",
    "verify_pdf",
]
