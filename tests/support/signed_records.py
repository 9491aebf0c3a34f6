"""Small kvselect records signed the way owners sign them (owner-side, PAdES B-LT) and stored the way
kvselect stores them: a one-page PDF instead of the full record, so the verification and attack tests
build in a second and verify in milliseconds.

`production_like_ca` issues the same files as the development CA (`issue_dev_certificates`: CA, CRL,
TSA, one PKCS#12 per role, the seal's certificate) under names that are not kvselect's development
names, so a record signed with them can be "ready for procurement" - what a real deployment's CA gives.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from django.core.files.base import ContentFile
from weasyprint import HTML

from selection.certificates import signing
from selection.certificates.signing import dev_ca
from selection.models import DecisionRecord, RecordApproval

ROLES = ("business", "platform", "security")
NAMES = {"business": "张伟", "platform": "Priya Raman", "security": "Jonas Berg", "seal": "Example Corp seal"}
PASSPHRASE = "signed-records-pass"
# Page 1 of the small record: the decision (where the B1 overlay paints) and the procurement banner.
DECISION_BOX = (40, 700, 560, 730)
BANNER_BOX = (40, 640, 560, 670)
RECORD_HTML = """<style>@page { size: A4; margin: 0 } body { margin: 0; font: 12pt sans-serif }
.decision { position: absolute; left: 40pt; top: 112pt } .banner { position: absolute; left: 40pt;
top: 172pt; color: #b00 }</style>
<p class="decision">Decision: vLLM 0.8.5 - chosen engine</p>
<p class="banner">Not ready for procurement: open items remain.</p>"""
BOXES = {role: (0, 40 + 130 * i, 60, 160 + 130 * i, 140) for i, role in enumerate((*ROLES, "seal"))}


def production_like_ca(out: Path) -> signing.DevCertificatePaths:
    """A CA, CRL, TSA and PKCS#12s laid out as the development CA's, but not named as kvselect's development
    CA: nothing it issues is flagged "development certificate". The names are patched where the CA is
    issued (`signing.dev_ca`); the check that flags development certificates keeps the real ones."""
    with mock.patch.multiple(
        dev_ca,
        DEV_ORGANISATION="Example Corp",
        DEV_CA_COMMON_NAME="Example Corp Signing Root",
        DEV_TSA_COMMON_NAME="Example Corp Time-Stamping",
    ):
        return signing.issue_dev_certificates(out, NAMES, PASSPHRASE)


@dataclass(frozen=True)
class SignedRecord:
    """A rendered record and the same record signed by its three owners (B-LT), with their fingerprints."""

    rendered: bytes
    signed: bytes
    fingerprints: dict[str, str]
    certs: signing.DevCertificatePaths

    @property
    def ca(self) -> bytes:
        return self.certs.ca_certificate.read_bytes()

    def long_term(self) -> dict:
        """The timestamper and validation material kvselect signs with (PAdES B-LT)."""
        folder = self.certs.ca_certificate.parent
        return {
            "timestamper": signing.dev_timestamper(folder),
            "validation_material": signing.ValidationMaterial([self.ca], [self.certs.crl.read_bytes()]),
        }


def render_small_record(html: str = RECORD_HTML) -> bytes:
    """The one-page record with its four empty signature fields, as kvselect stores its rendered PDF."""
    return signing.prepare_signature_fields(HTML(string=html).write_pdf(), BOXES)


def owner_sign(pdf: bytes, certs: signing.DevCertificatePaths, role: str, long_term: dict) -> bytes:
    """One owner's signature as kvselect-sign and the server make it: prepared, signed with the key, embedded."""
    key = signing.load_signer(certs.pkcs12[role].read_bytes(), PASSPHRASE)
    prepared = signing.prepare_owner_signature(pdf, key.signing_cert.dump(), role, NAMES[role], f"{role} owner", "ok")
    cms = signing.sign_attributes(key, prepared.signed_attributes)
    return signing.finish_owner_signature(prepared, cms, key.signing_cert.sha256.hex(), base=pdf, **long_term)


def signed_record(certs: signing.DevCertificatePaths, rendered: bytes | None = None) -> SignedRecord:
    rendered = rendered if rendered is not None else render_small_record()
    record = SignedRecord(rendered, b"", {}, certs)
    pdf, long_term = rendered, record.long_term()
    for role in ROLES:
        pdf = owner_sign(pdf, certs, role, long_term)
    fingerprints = {
        role: signing.pkcs12_certificate(certs.pkcs12[role].read_bytes(), PASSPHRASE).sha256 for role in ROLES
    }
    return SignedRecord(rendered, pdf, fingerprints, certs)


def store_record(selection, owners: dict, signed: SignedRecord, *, simulated: bool = False) -> DecisionRecord:
    """The record as kvselect keeps it once the three owners signed: the frozen snapshot naming each owner's
    certificate, the rendered PDF and its SHA-256, the signed PDF and its SHA-256."""
    snapshot = {
        "simulated": simulated,
        "owners": [
            {"role": role, "name": NAMES[role], "certificate_sha256": signed.fingerprints[role]} for role in ROLES
        ],
    }
    version = (selection.records.order_by("-version").values_list("version", flat=True).first() or 0) + 1
    record = DecisionRecord(
        selection=selection,
        version=version,
        status=DecisionRecord.Status.SIGNED,
        snapshot=snapshot,
        snapshot_sha256=hashlib.sha256(repr(snapshot).encode()).hexdigest(),
        created_by=owners["business"],
        pdf_sha256=hashlib.sha256(signed.rendered).hexdigest(),
        signed_sha256=hashlib.sha256(signed.signed).hexdigest(),
    )
    record.pdf.save(f"small-{selection.pk}-v{version}.pdf", ContentFile(signed.rendered), save=False)
    record.signed_pdf.save(f"small-{selection.pk}-v{version}-signed.pdf", ContentFile(signed.signed), save=False)
    record.save()
    for role in ROLES:
        RecordApproval.objects.create(record=record, role=role, user=owners[role])
    return record
