"""Every way of changing a signed record unseen that the security review (2026-12-06, B1-B6) and the
published attacks on signed PDFs found, each built here as a small PDF, and kvselect's verification
refusing each with its reason - with Poppler's `pdfsig`, a plain signature check, run beside it.

Published classes: shadow attacks hide / replace / hide-and-replace (Mainka, Mladenov, Rohlmann,
Schwenk: "Shadow Attacks", NDSS 2021); incremental saving attack, signature wrapping attack and
universal signature forgery (Mladenov, Mainka, Meyer zu Selhausen, Grothe, Schwenk: "1 Trillion Dollar
Refund", CCS 2019). Shadow attacks hide their second content in the document before it is signed; a
kvselect record is rendered by kvselect, so here the shadow content is put into the rendered record
(the worst case: kvselect's own PDF carried it) and the change after signing is what must be caught.

`PDFSIG_MISSES` is what the README's table says: True where pdfsig still calls every signature valid.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest
from asn1crypto import cms as asn1_cms
from asn1crypto import x509 as asn1_x509
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from pyhanko.pdf_utils import generic
from pyhanko.pdf_utils.generic import pdf_name
from pyhanko.pdf_utils.incremental_writer import IncrementalPdfFileWriter
from pyhanko.pdf_utils.reader import PdfFileReader
from pyhanko.sign import fields as sig_fields
from rest_framework.test import APIClient
from weasyprint import HTML

from selection.certificates import signing
from selection.certificates.services import enrol_certificate
from selection.certificates.signing import dev_ca
from selection.domain import record_integrity as integrity
from selection.records.verification import NOT_A_KVSELECT_RECORD, verification_report
from tests.support import signed_records as sr
from tests.support.environment import IN_CI

# attack -> pdfsig (Poppler 22) still calls every signature it lists valid
PDFSIG_MISSES = {
    "b1_overlay_fields": True,
    "b2_seal_by_profile_certificate": True,
    "b3_forged_record": True,
    "shadow_hide": True,
    "shadow_replace_form": True,
    "shadow_hide_and_replace": True,
    "isa_new_content": True,
    "isa_without_xref": True,
    "signature_wrapping": False,
    "universal_forgery": False,
    "metadata_retitled": True,
}


@pytest.fixture(autouse=True)
def need_pdfsig():
    if not shutil.which("pdfsig"):
        if IN_CI:
            pytest.fail("pdfsig (poppler-utils) is missing in CI")
        pytest.skip("pdfsig (poppler-utils) is not installed")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return sr.production_like_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def genuine(certs):
    return sr.signed_record(certs)


@pytest.fixture
def kvselect(settings, certs, media):
    """kvselect configured with the CA as its trust root and the seal certificate it issued."""
    settings.KVSELECT_TRUST_ROOTS = [str(certs.ca_certificate)]
    settings.KVSELECT_CRLS = []
    settings.KVSELECT_SEAL_CERTIFICATES = [str(certs.seal_certificate)]
    settings.KVSELECT_DEV_CA_DIR = str(media / "no-dev-ca")
    return settings


def pdfsig_misses(pdf: bytes, tmp_path: Path) -> bool:
    """pdfsig lists at least one signature and calls every one it lists valid."""
    path = tmp_path / "pdfsig.pdf"
    path.write_bytes(pdf)
    out = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True, timeout=60).stdout
    listed = out.count("Signature Validation:")
    return listed > 0 and out.count("Signature is Valid.") == listed


def refused(pdf: bytes, *codes: str) -> dict:
    """kvselect's verdict on ``pdf``: not verified, not ready, every finding named with a message, and each
    of ``codes`` among them."""
    report = verification_report(pdf)
    assert not report["all_ok"] and not report["procurement_ready"], report
    found = {f["code"] for f in report["findings"]}
    assert set(codes) <= found, (codes, report["findings"])
    assert all(f["message"] for f in report["findings"])
    return report


# --------------------------------------------------------------------------- building the attacks


def _writer(pdf: bytes) -> IncrementalPdfFileWriter:
    return IncrementalPdfFileWriter(io.BytesIO(pdf), strict=False)


def _written(writer: IncrementalPdfFileWriter) -> bytes:
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def _form_xobject(writer, width: float, height: float, content: bytes):
    font = generic.DictionaryObject(
        {
            pdf_name("/Type"): pdf_name("/Font"),
            pdf_name("/Subtype"): pdf_name("/Type1"),
            pdf_name("/BaseFont"): pdf_name("/Helvetica-Bold"),
        }
    )
    stream = generic.StreamObject(
        {
            pdf_name("/Type"): pdf_name("/XObject"),
            pdf_name("/Subtype"): pdf_name("/Form"),
            pdf_name("/BBox"): generic.ArrayObject([generic.FloatObject(v) for v in (0, 0, width, height)]),
            pdf_name("/Resources"): generic.DictionaryObject(
                {pdf_name("/Font"): generic.DictionaryObject({pdf_name("/F1"): font})}
            ),
        },
        stream_data=content,
    )
    return writer.add_object(stream)


def _painted(text: str, width: float, height: float) -> bytes:
    return f"q 1 1 1 rg 0 0 {width} {height} re f Q BT 0.8 0 0 rg /F1 11 Tf 4 9 Td ({text}) Tj ET".encode()


def overlay_fields(pdf: bytes) -> bytes:
    """B1 (the review's reproduction): one update adding two empty, visible signature fields whose
    appearances paint a new decision and "Ready for procurement" over the banner."""
    writer = _writer(pdf)
    for name, box, text in (
        ("overlay1", sr.DECISION_BOX, "Decision: SGLang 0.5.2 - chosen engine"),
        ("overlay2", sr.BANNER_BOX, "Ready for procurement: all owners signed."),
    ):
        sig_fields.append_signature_field(writer, sig_fields.SigFieldSpec(name, on_page=0, box=box))
        field = next(
            ref.get_object()
            for found, _value, ref in sig_fields.enumerate_sig_fields(writer, filled_status=None)
            if found == name
        )
        width, height = box[2] - box[0], box[3] - box[1]
        field[pdf_name("/AP")] = generic.DictionaryObject(
            {pdf_name("/N"): _form_xobject(writer, width, height, _painted(text, width, height))}
        )
        writer.update_container(field)
    return _written(writer)


def _page(writer, index: int = 0):
    return writer.root["/Pages"]["/Kids"][index].get_object()


def _append_content(writer, page, content: bytes):
    extra = writer.add_object(generic.StreamObject(stream_data=content))
    contents = page.raw_get("/Contents")
    page[pdf_name("/Contents")] = generic.ArrayObject(
        (list(contents) if isinstance(contents, generic.ArrayObject) else [contents]) + [extra]
    )
    writer.update_container(page)
    return extra


def new_content(pdf: bytes) -> bytes:
    """Incremental saving attack, variant 1: a proper update (objects, xref, trailer) drawing over page 1."""
    writer = _writer(pdf)
    _append_content(writer, _page(writer), b"q 1 1 1 rg 40 700 520 30 re f Q")
    return _written(writer)


def appended_without_xref(pdf: bytes) -> bytes:
    """Incremental saving attack, variant 2: objects appended after the last %%EOF with no cross-reference
    section, for readers that repair the file by scanning objects."""
    return (
        pdf + b"\n9999 0 obj\n<< /Type /Annot /Subtype /FreeText /Rect [40 700 560 730] /Contents (SGLang) >>\nendobj\n"
    )


def retitled(pdf: bytes) -> bytes:
    """Metadata changed after signing: the document's /Info title."""
    writer = _writer(pdf)
    info = writer.trailer["/Info"].get_object() if "/Info" in writer.trailer else generic.DictionaryObject()
    info[pdf_name("/Title")] = generic.TextStringObject("Decision: SGLang")
    writer.set_info(info)
    return _written(writer)


def with_cover(pdf: bytes) -> tuple[bytes, generic.Reference]:
    """The shadow document for "hide": page 1 draws a white cover over a second decision text."""
    writer = _writer(pdf)
    cover = _append_content(writer, _page(writer), b"q 1 1 1 rg 40 560 520 40 re f Q")
    return _written(writer), cover.reference


def hide(pdf: bytes, cover: generic.Reference) -> bytes:
    """Shadow attack, hide: the update empties the cover's content stream (same object number)."""
    writer = _writer(pdf)
    cover = generic.Reference(cover.idnum, cover.generation, writer)
    writer.mark_update(cover)
    stream = writer.get_object(cover)
    stream._data, stream._encoded_data = b"", None  # the attack rewrites the stream in place
    stream[pdf_name("/Length")] = generic.NumberObject(0)
    stream.pop(pdf_name("/Filter"), None)
    return _written(writer)


def with_text_field(pdf: bytes) -> bytes:
    """The shadow document for "replace": a text form field on page 1 showing the decision."""
    writer = _writer(pdf)
    page = _page(writer)
    box = (40, 520, 560, 550)
    appearance = _form_xobject(writer, 520, 30, _painted("Decision: vLLM 0.8.5", 520, 30))
    field = writer.add_object(
        generic.DictionaryObject(
            {
                pdf_name("/Type"): pdf_name("/Annot"),
                pdf_name("/Subtype"): pdf_name("/Widget"),
                pdf_name("/FT"): pdf_name("/Tx"),
                pdf_name("/T"): generic.TextStringObject("decision_note"),
                pdf_name("/V"): generic.TextStringObject("Decision: vLLM 0.8.5"),
                pdf_name("/Rect"): generic.ArrayObject([generic.FloatObject(v) for v in box]),
                pdf_name("/P"): writer.root["/Pages"]["/Kids"][0],
                pdf_name("/AP"): generic.DictionaryObject({pdf_name("/N"): appearance}),
            }
        )
    )
    page[pdf_name("/Annots")] = generic.ArrayObject([field])
    writer.update_container(page)
    writer.root[pdf_name("/AcroForm")] = generic.DictionaryObject({pdf_name("/Fields"): generic.ArrayObject([field])})
    writer.update_root()
    return _written(writer)


def replace_form_value(pdf: bytes) -> bytes:
    """Shadow attack, replace: the update fills the text field with another decision (form filling)."""
    writer = _writer(pdf)
    field = next(
        ref.get_object()
        for ref in writer.root["/AcroForm"]["/Fields"]
        if str(ref.get_object().get("/T")) == "decision_note"
    )
    field[pdf_name("/V")] = generic.TextStringObject("Decision: SGLang 0.5.2")
    field[pdf_name("/AP")] = generic.DictionaryObject(
        {pdf_name("/N"): _form_xobject(writer, 520, 30, _painted("Decision: SGLang 0.5.2", 520, 30))}
    )
    writer.update_container(field)
    return _written(writer)


def with_shadow_content(pdf: bytes) -> tuple[bytes, generic.Reference]:
    """The shadow document for "hide-and-replace": a second page content, in the file but shown nowhere."""
    writer = _writer(pdf)
    font = _form_xobject(writer, 1, 1, b"")  # keeps a resources-only object alive beside the shadow stream
    shadow = writer.add_object(generic.StreamObject(stream_data=b"BT /F1 24 Tf 40 700 Td (Decision: SGLang) Tj ET"))
    catalog_note = generic.DictionaryObject({pdf_name("/ShadowNote"): font, pdf_name("/Shadow"): shadow})
    writer.root[pdf_name("/PieceInfo")] = catalog_note  # referenced, so it is part of the signed document
    writer.update_root()
    return _written(writer), shadow.reference


def hide_and_replace(pdf: bytes, shadow: generic.Reference) -> bytes:
    """Shadow attack, hide-and-replace: the update points page 1's content at the shadow content."""
    writer = _writer(pdf)
    page = _page(writer)
    page[pdf_name("/Contents")] = generic.IndirectObject(shadow.idnum, shadow.generation, writer)
    writer.update_container(page)
    return _written(writer)


def wrapped(pdf: bytes) -> bytes:
    """Signature wrapping: new content (a whole revision) inserted after the last signature's /Contents,
    its second signed block moved behind it and the /ByteRange rewritten to point at the moved block."""
    start, length1, start2, length2 = _last_signature(pdf)
    position = pdf.find(b"/ByteRange [", start2, start2 + length2)
    if position < 0:
        position = pdf.rfind(b"/ByteRange [", 0, length1)
    end = pdf.index(b"]", position) + 1
    while pdf[end : end + 1] == b" ":  # pyHanko pads the reserved /ByteRange with spaces
        end += 1
    malicious = new_content(pdf[: start2 + length2])[start2 + length2 :]
    new = f"/ByteRange [{start} {length1} {start2 + len(malicious)} {length2}]".encode()
    assert len(new) <= end - position, (pdf[position:end], new)
    patched = pdf[:position] + new.ljust(end - position) + pdf[end:]
    return patched[:start2] + malicious + patched[start2:]


def _last_signature(pdf: bytes) -> tuple[int, int, int, int]:
    sig = PdfFileReader(io.BytesIO(pdf), strict=False).embedded_signatures[-1]
    return tuple(int(v) for v in sig.byte_range)


def forged_signature(pdf: bytes, field: str) -> bytes:
    """Universal signature forgery: ``field`` filled with a signature dictionary that has a /ByteRange
    covering nothing and an empty /Contents, so there is nothing to check."""
    writer = _writer(pdf)
    target = next(
        ref.get_object()
        for found, _value, ref in sig_fields.enumerate_sig_fields(writer, filled_status=None)
        if found == field
    )
    value = writer.add_object(
        generic.DictionaryObject(
            {
                pdf_name("/Type"): pdf_name("/Sig"),
                pdf_name("/Filter"): pdf_name("/Adobe.PPKLite"),
                pdf_name("/SubFilter"): pdf_name("/ETSI.CAdES.detached"),
                pdf_name("/ByteRange"): generic.ArrayObject([generic.NumberObject(0)] * 4),
                pdf_name("/Contents"): generic.ByteStringObject(b""),
                pdf_name("/Name"): generic.TextStringObject("Jonas Berg"),
            }
        )
    )
    target[pdf_name("/V")] = value
    writer.update_container(target)
    return _written(writer)


def flipped_byte(pdf: bytes) -> bytes:
    """One byte of the rendered record changed (in its binary comment): kvselect no longer knows the file."""
    data = bytearray(pdf)
    data[pdf.index(b"\n") + 2] ^= 0x01
    return bytes(data)


# --------------------------------------------------------------------------- the genuine record (controls)


@pytest.mark.django_db
def test_the_genuine_record_verifies_is_certified_and_is_ready_for_procurement(kvselect, selection, owners, genuine):
    """The control: the stored record verifies, every revision accounted for, certified (DocMDP), ready."""
    sr.store_record(selection, owners, genuine)
    report = verification_report(genuine.signed)
    assert report["all_ok"] and report["findings"] == [] and report["procurement_ready"], report
    assert report["certification"] == "FILL_FORMS" and report["signatures"][0]["certification"] == "FILL_FORMS"
    kinds = [(r["kind"], r["field"]) for r in report["revisions"]]
    assert kinds == [
        ("signature", "business"),
        ("validation_data", None),
        ("signature", "platform"),
        ("validation_data", None),
        ("signature", "security"),
        ("validation_data", None),
    ]
    assert report["record"]["exact"] and report["stored"]


@pytest.mark.django_db
def test_later_validation_data_and_a_document_timestamp_keep_it_verified_and_ready(
    kvselect, selection, owners, genuine
):
    """PAdES LTA: a DSS update and a document timestamp after the last signature are the record's own
    long-term updates - verified, still ready for procurement (the stored record plus its LTA updates)."""
    sr.store_record(selection, owners, genuine)
    extended = signing.add_document_timestamp(genuine.signed, **genuine.long_term())
    report = verification_report(extended)
    assert report["all_ok"] and report["procurement_ready"], report["findings"]
    assert not report["record"]["exact"] and report["record"]["stored"]
    assert "document_timestamp" in [r["kind"] for r in report["revisions"][6:]]


# --------------------------------------------------------------------------- B1-B3: verification


@pytest.mark.django_db
def test_b1_visible_fields_added_after_signing_fail_with_the_new_fields_named(
    kvselect, selection, owners, genuine, tmp_path
):
    sr.store_record(selection, owners, genuine)
    tampered = overlay_fields(genuine.signed)
    text = subprocess.run(["pdftotext", "-f", "1", "-l", "1", "-", "-"], input=tampered, capture_output=True).stdout
    assert b"SGLang" in text and b"Ready" in text  # the page now says so
    report = refused(tampered, integrity.NEW_FIELD)
    new = next(f for f in report["findings"] if f["code"] == integrity.NEW_FIELD)
    assert new["fields"] == ["overlay1", "overlay2"] and new["revision"] == 8
    business, _platform, security = report["signatures"]
    assert business["modification_level"] == "OTHER"  # the certification (DocMDP) refuses the new fields too
    assert security["last"] and not security["ok"]  # only validation data may follow the last signature
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["b1_overlay_fields"]


@pytest.mark.django_db
def test_b1_verify_record_exits_non_zero_and_says_why(kvselect, selection, owners, genuine, tmp_path, capsys):
    sr.store_record(selection, owners, genuine)
    path = tmp_path / "tampered.pdf"
    path.write_bytes(overlay_fields(genuine.signed))
    with pytest.raises(CommandError, match="changed after it was signed"):
        call_command("verify-record", str(path))
    out = capsys.readouterr().out
    assert "revision 8: not_allowed" in out and "result: NOT VERIFIED" in out
    assert "adds signature fields the record kvselect rendered does not have: “overlay1”, “overlay2”." in out


@pytest.mark.django_db
def test_b1_the_api_and_the_verify_page_say_not_verified_with_the_reason(kvselect, selection, owners, genuine, client):
    sr.store_record(selection, owners, genuine)
    tampered = overlay_fields(genuine.signed)
    api = APIClient()
    api.force_authenticate(owners["business"])
    answer = api.post("/api/v1/records/verify/", {"file": SimpleUploadedFile("t.pdf", tampered)}, format="multipart")
    assert answer.status_code == 200 and answer.data["all_ok"] is False and answer.data["procurement_ready"] is False
    assert integrity.NEW_FIELD in {f["code"] for f in answer.data["findings"]}
    client.force_login(owners["business"])
    body = client.post(reverse("selection:record-verify"), {"file": SimpleUploadedFile("t.pdf", tampered)}).content
    page = body.decode()
    assert 'class="verdict--bad"' in page and "changed after it was signed" in page
    assert "adds signature fields the record kvselect rendered does not have: “overlay1”, “overlay2”." in page
    assert "not allowed: see above" in page and "Not ready for procurement" in page


@pytest.mark.django_db
def test_b2_a_seal_by_a_profile_certificate_fails_and_the_configured_seal_passes(
    kvselect, selection, owners, genuine, certs, tmp_path
):
    sr.store_record(selection, owners, genuine)
    blob, _info = signing.issue_certificate(certs.ca_certificate.parent, "Ana Silva", "observer-pass")
    sealed = signing.sign_pdf(genuine.signed, blob, "observer-pass", "seal", "Ana Silva", "seal", "seal")
    report = refused(sealed)
    seal = report["signatures"][-1]
    assert seal["field"] == "seal" and seal["trusted"] and seal["signed_by_owner"] is False
    assert pdfsig_misses(sealed, tmp_path) is PDFSIG_MISSES["b2_seal_by_profile_certificate"]
    # the organisation's configured seal certificate may seal, after the last owner
    real = signing.sign_pdf(genuine.signed, certs.pkcs12["seal"].read_bytes(), sr.PASSPHRASE, "seal", "S", "seal", "s")
    assert verification_report(real)["all_ok"]


@pytest.mark.django_db
def test_b2_a_seal_certificate_cannot_be_enrolled_by_a_person(kvselect, owners, certs):
    with pytest.raises(ValidationError, match="organisational seal certificate"):
        enrol_certificate(user=owners["business"], certificate=certs.seal_certificate.read_bytes())


@pytest.mark.django_db
def test_b3_a_pdf_kvselect_did_not_issue_is_not_a_kvselect_record(
    kvselect, selection, owners, genuine, certs, tmp_path
):
    """One byte of the rendered record changed, then the three owner fields signed by one non-owner."""
    sr.store_record(selection, owners, genuine)
    blob, _info = signing.issue_certificate(certs.ca_certificate.parent, "Ana Silva", "observer-pass")
    forged = new_content(flipped_byte(genuine.rendered))
    for role in sr.ROLES:
        forged = signing.sign_pdf(forged, blob, "observer-pass", role, "Ana Silva", role, "approve")
    report = refused(forged, NOT_A_KVSELECT_RECORD)
    assert report["record"] is None and not report["kvselect_record"]
    assert all(s["intact"] and s["valid"] and s["trusted"] for s in report["signatures"])
    path = tmp_path / "forged.pdf"
    path.write_bytes(forged)
    with pytest.raises(CommandError, match="not a kvselect record"):
        call_command("verify-record", str(path))
    assert pdfsig_misses(forged, tmp_path) is PDFSIG_MISSES["b3_forged_record"]


# --------------------------------------------------------------------------- B4-B6: the embed step and enrolment


def test_b4_a_prepared_revision_edited_in_storage_is_not_embedded(certs, genuine):
    key = signing.load_signer(certs.pkcs12["business"].read_bytes(), sr.PASSPHRASE)
    prepared = signing.prepare_owner_signature(
        genuine.rendered, key.signing_cert.dump(), "business", "张伟", "business owner", "Approves decision record v5"
    )
    cms = signing.sign_attributes(key, prepared.signed_attributes)
    edited = prepared.pdf.replace(b"Approves decision record v5", b"REJECTS  decision record v5")
    assert edited != prepared.pdf
    storage_copy = signing.PreparedSignature(
        edited, prepared.document_digest, prepared.signed_attributes, prepared.reserved_start, prepared.reserved_end
    )
    with pytest.raises(signing.SigningError, match="changed since it was prepared"):
        signing.finish_owner_signature(storage_copy, cms, key.signing_cert.sha256.hex(), base=genuine.rendered)
    assert signing.finish_owner_signature(prepared, cms, key.signing_cert.sha256.hex(), base=genuine.rendered)


def test_b4_a_prepared_revision_on_another_base_is_not_embedded(certs, genuine):
    key = signing.load_signer(certs.pkcs12["business"].read_bytes(), sr.PASSPHRASE)
    prepared = signing.prepare_owner_signature(genuine.rendered, key.signing_cert.dump(), "business", "B", "b", "r")
    cms = signing.sign_attributes(key, prepared.signed_attributes)
    with pytest.raises(signing.SigningError, match="does not extend the record"):
        signing.finish_owner_signature(
            prepared, cms, key.signing_cert.sha256.hex(), base=flipped_byte(genuine.rendered)
        )


def _revoked_certificate(certs) -> tuple[bytes, bytes]:
    """A certificate the CA issued and then revoked (key compromise), and the CRL saying so."""
    ca_cert = x509.load_pem_x509_certificate(certs.ca_certificate.read_bytes())
    ca_key = serialization.load_pem_private_key(certs.ca_key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = dev_ca.leaf_certificate(  # the CA's own issuing routine, as the CA would issue it
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Oscar Outsider")]),
        key,
        ca_cert,
        ca_key,
        ca_cert.not_valid_after_utc,
    )
    revoked = (
        x509.RevokedCertificateBuilder()
        .serial_number(cert.serial_number)
        .revocation_date(ca_cert.not_valid_before_utc)
        .add_extension(x509.CRLReason(x509.ReasonFlags.key_compromise), False)
        .build()
    )
    crl = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(ca_cert.not_valid_before_utc)
        .next_update(ca_cert.not_valid_after_utc)
        .add_revoked_certificate(revoked)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), crl.public_bytes(serialization.Encoding.PEM)


@pytest.mark.django_db
def test_b5_enrolment_refuses_a_certificate_the_configured_crl_revokes(kvselect, owners, certs, tmp_path):
    certificate, crl = _revoked_certificate(certs)
    enrolled = enrol_certificate(user=owners["platform"], certificate=certificate)  # no CRL configured: accepted
    assert enrolled.common_name == "Oscar Outsider"
    (tmp_path / "revoked.crl").write_bytes(crl)
    kvselect.KVSELECT_CRLS = [str(tmp_path / "revoked.crl")]
    with pytest.raises(ValidationError, match="revoked") as excinfo:
        enrol_certificate(user=owners["security"], certificate=certificate)
    assert "compromised key" in str(excinfo.value)


def _with_extra_certificates(cms_bytes: bytes, certs) -> bytes:
    """The owner's CMS with eight certificates of an attacker's own CA added to its certificate set."""
    content = asn1_cms.ContentInfo.load(cms_bytes)
    extra = signing.issue_dev_certificates(
        certs.ca_certificate.parent.parent / "attacker", {f"x{i}": f"injected cert {i}" for i in range(8)}, "x" * 8
    )
    for path in extra.pkcs12.values():
        info = signing.pkcs12_certificate(path.read_bytes(), "x" * 8)
        der = x509.load_pem_x509_certificate(info.pem.encode()).public_bytes(serialization.Encoding.DER)
        cert = asn1_x509.Certificate.load(der)
        content["content"]["certificates"].append(asn1_cms.CertificateChoices(name="certificate", value=cert))
    return content.dump(force=True)


def test_b6_only_the_signers_chain_is_embedded(certs, genuine):
    key = signing.load_signer(certs.pkcs12["business"].read_bytes(), sr.PASSPHRASE)
    prepared = signing.prepare_owner_signature(genuine.rendered, key.signing_cert.dump(), "business", "B", "b", "r")
    cms = _with_extra_certificates(signing.sign_attributes(key, prepared.signed_attributes), certs)
    assert len(asn1_cms.ContentInfo.load(cms)["content"]["certificates"]) >= 9
    pdf = signing.finish_owner_signature(prepared, cms, key.signing_cert.sha256.hex(), **genuine.long_term())
    embedded = PdfFileReader(io.BytesIO(pdf), strict=False).embedded_signatures[0]
    names = [c.chosen.subject.native.get("common_name") for c in embedded.signed_data["certificates"]]
    assert names == ["张伟"], names  # the signer, once; no injected certificate, and the root stays out


# --------------------------------------------------------------------------- the published attack classes


@pytest.mark.django_db
def test_shadow_hide_uncovering_signed_content_fails(kvselect, selection, owners, certs, tmp_path):
    rendered, cover = with_cover(
        HTML(
            string=sr.RECORD_HTML + "<p style='position:absolute;top:250pt;left:40pt'>Decision: SGLang 0.5.2</p>"
        ).write_pdf()
    )
    record = sr.signed_record(certs, signing.prepare_signature_fields(rendered, sr.BOXES))
    sr.store_record(selection, owners, record)
    tampered = hide(record.signed, cover)
    refused(tampered, integrity.CHANGES_DOCUMENT)
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["shadow_hide"]


@pytest.mark.django_db
def test_shadow_replace_via_a_form_field_fails(kvselect, selection, owners, certs, tmp_path):
    rendered = signing.prepare_signature_fields(with_text_field(HTML(string=sr.RECORD_HTML).write_pdf()), sr.BOXES)
    record = sr.signed_record(certs, rendered)
    sr.store_record(selection, owners, record)
    tampered = replace_form_value(record.signed)
    refused(tampered, integrity.FORM_FILLED_WITHOUT_SIGNATURE)
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["shadow_replace_form"]


@pytest.mark.django_db
def test_shadow_hide_and_replace_swapping_the_page_content_fails(kvselect, selection, owners, certs, tmp_path):
    rendered, shadow = with_shadow_content(HTML(string=sr.RECORD_HTML).write_pdf())
    record = sr.signed_record(certs, signing.prepare_signature_fields(rendered, sr.BOXES))
    sr.store_record(selection, owners, record)
    tampered = hide_and_replace(record.signed, shadow)
    refused(tampered, integrity.CHANGES_DOCUMENT)
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["shadow_hide_and_replace"]


@pytest.mark.django_db
def test_incremental_saving_with_new_content_fails(kvselect, selection, owners, genuine, tmp_path):
    sr.store_record(selection, owners, genuine)
    tampered = new_content(genuine.signed)
    refused(tampered, integrity.CHANGES_DOCUMENT)
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["isa_new_content"]


@pytest.mark.django_db
def test_incremental_saving_without_a_cross_reference_section_fails(kvselect, selection, owners, genuine, tmp_path):
    sr.store_record(selection, owners, genuine)
    tampered = appended_without_xref(genuine.signed)
    report = refused(tampered, integrity.TRAILING_BYTES)
    assert all(s["ok"] for s in report["signatures"])  # each signature alone still checks out
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["isa_without_xref"]


@pytest.mark.django_db
def test_metadata_changed_after_signing_fails(kvselect, selection, owners, genuine, tmp_path):
    sr.store_record(selection, owners, genuine)
    tampered = retitled(genuine.signed)
    report = refused(tampered, integrity.CHANGES_DOCUMENT)
    assert any("/Title" in f["detail"] for f in report["findings"])
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["metadata_retitled"]


@pytest.mark.django_db
def test_signature_wrapping_fails(kvselect, selection, owners, genuine, tmp_path):
    sr.store_record(selection, owners, genuine)
    tampered = wrapped(genuine.signed)
    report = refused(tampered)
    assert report["error"] or not report["signatures"][-1]["ok"]
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["signature_wrapping"]


@pytest.mark.django_db
def test_universal_signature_forgery_fails(kvselect, selection, owners, certs, genuine, tmp_path):
    """The security owner's field filled with an empty signature on a record the other two signed."""
    two = sr.owner_sign(
        sr.owner_sign(genuine.rendered, certs, "business", genuine.long_term()), certs, "platform", genuine.long_term()
    )
    sr.store_record(selection, owners, sr.SignedRecord(genuine.rendered, two, genuine.fingerprints, certs))
    tampered = forged_signature(two, "security")
    report = refused(tampered, integrity.UNREADABLE_SIGNATURE)
    forged = next(s for s in report["signatures"] if s["field"] == "security")
    assert not forged["ok"] and forged["error"]
    assert pdfsig_misses(tampered, tmp_path) is PDFSIG_MISSES["universal_forgery"]


def test_every_attack_has_its_pdfsig_verdict_in_the_readme():
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    for attack, misses in PDFSIG_MISSES.items():
        line = next((line for line in readme.splitlines() if f"`{attack}`" in line), None)
        assert line is not None, attack
        assert ("misses" if misses else "refuses") in line, line
