"""Decision records end to end: draft -> review (frozen) -> approvals -> PDF -> three signatures -> verify."""

import subprocess

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import call_command
from django.db import DatabaseError, transaction
from django.utils import timezone

from benchmarks.models import BenchmarkRun, RunPoint
from selection.certificates import signing
from selection.certificates.services import current_certificate
from selection.i18n import person_name
from selection.models import DecisionRecord, Membership, SigningCertificate
from selection.records.rendering import render_pdf
from selection.records.services import approve, create_draft, sign, start_review, update_draft
from selection.records.verification import verification_report
from selection.setup.services import update_selection
from tests.support.lifecycle import PASSPHRASE, approve_all, sign_all


def test_full_lifecycle_and_verification(decided, architect, owners, dev_certs, settings, tmp_path):
    record = create_draft(selection=decided, user=architect, rationale="Lowest TTFT at target load.")
    record = start_review(record=record, user=architect)
    assert record.status == "in_review" and len(record.snapshot_sha256) == 64
    winner = decided.candidates.get(pk=int(decided.scores.filter(include_simulated=False).first().leader))
    assert record.snapshot["decision"]["chosen_engine"] == f"{winner.engine.name} {winner.engine_version}"
    record = approve_all(record, owners)
    assert record.status == "approved"
    with pytest.raises(ValidationError, match="business owner signs next"):
        sign(
            record=record,
            user=owners["platform"],
            role="platform",
            pkcs12=dev_certs.pkcs12["platform"].read_bytes(),
            passphrase=PASSPHRASE,
        )
    record = sign_all(record, owners, dev_certs)
    assert record.status == "signed" and record.signed_sha256
    decided.refresh_from_db()
    assert decided.status == "decided"
    pdf = record.signed_pdf.open("rb").read()
    settings.KVSELECT_TRUST_ROOTS = [str(dev_certs.ca_certificate)]
    report = verification_report(pdf)
    assert len(report["signatures"]) == 3 and report["all_ok"]
    assert report["matches_known_record"] is True and report["record"]["version"] == 1
    assert report["owners_checked"] and all(sig["signed_by_owner"] for sig in report["signatures"])
    assert report["simulated"] is False and report["development_certificates"] and not report["procurement_ready"]
    text = subprocess.run(["pdftotext", "-", "-"], input=pdf, capture_output=True, check=True).stdout.decode()
    assert "张" in text and "SIMULATED" not in text
    # the approvals table says who approved when (it said "not yet" for all three on a signed record)
    flat = " ".join(text.split())
    assert "not yet" not in flat
    for approval in record.approvals.select_related("user"):
        when = approval.approved_at.strftime("%Y-%m-%d %H:%M UTC")
        who = "张伟" if approval.role == "business" else approval.user.username
        assert f"{when} · by {who}" in flat
    assert "approved_at" not in record.snapshot["owners"][0]  # the frozen snapshot is not touched
    path = tmp_path / "signed.pdf"
    path.write_bytes(pdf)
    pdfsig = subprocess.run(["pdfsig", str(path)], capture_output=True, text=True)
    assert pdfsig.stdout.count("Signature is Valid") == 3, pdfsig.stdout
    tampered = bytearray(pdf)
    tampered[len(pdf) // 3] ^= 0x01
    bad = verification_report(bytes(tampered))
    assert not bad["all_ok"] and bad["matches_known_record"] is False


def test_only_the_named_owner_approves_and_only_once(decided, architect, owners):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    with pytest.raises(PermissionDenied):
        approve(record=record, user=owners["platform"], role="business")
    approve(record=record, user=owners["business"], role="business")
    with pytest.raises(ValidationError):
        approve(record=record, user=owners["business"], role="business")


def test_snapshot_is_frozen_in_the_service_and_the_database(decided, architect):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    with pytest.raises(ValidationError, match="frozen"):
        update_draft(record=record, user=architect, rationale="changed my mind")
    with pytest.raises(DatabaseError, match="frozen"), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(rationale="sneaky")
    with pytest.raises(DatabaseError), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).delete()


def test_signed_record_is_immutable_and_superseded_by_a_new_version(decided, architect, owners, dev_certs):
    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    record = sign_all(record, owners, dev_certs)
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(signed_sha256="0" * 64)
    with pytest.raises(DatabaseError), transaction.atomic():
        DecisionRecord.objects.filter(pk=record.pk).update(status="draft")
    successor = create_draft(selection=decided, user=architect, supersedes=record)
    assert successor.version == 2
    # a second attempt continues the successor draft (issue 19: no orphan version) ...
    assert create_draft(selection=decided, user=architect, supersedes=record).pk == successor.pk
    successor = start_review(record=successor, user=architect)
    with pytest.raises(ValidationError):  # ... and once it left draft, the record has its successor
        create_draft(selection=decided, user=architect, supersedes=record)
    successor = sign_all(approve_all(successor, owners), owners, dev_certs)
    record.refresh_from_db()
    assert record.status == "superseded" and successor.snapshot["lineage"]["supersedes"].endswith("v1")


def test_wrong_passphrase_names_the_problem(decided, architect, owners, dev_certs):
    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    with pytest.raises(ValidationError) as excinfo:
        sign(
            record=record,
            user=owners["business"],
            role="business",
            pkcs12=dev_certs.pkcs12["business"].read_bytes(),
            passphrase="wrong",
        )
    assert "pkcs12" in excinfo.value.message_dict


def test_review_refuses_a_selection_without_a_winner(selection_with_constraints, architect):
    record = create_draft(selection=selection_with_constraints, user=architect)
    with pytest.raises(ValidationError):
        start_review(record=record, user=architect)


def test_records_api_lifecycle_sign_and_verify(decided, architect, owners, dev_certs, settings):
    from rest_framework.test import APIClient

    settings.KVSELECT_TRUST_ROOTS = [str(dev_certs.ca_certificate)]
    client = APIClient()
    client.force_authenticate(architect)
    response = client.post(f"/api/v1/selections/{decided.pk}/records/", {"rationale": "fast"}, format="json")
    assert response.status_code == 201, response.json()
    rid = response.json()["id"]
    assert client.post(f"/api/v1/records/{rid}/", {"action": "start_review"}, format="json").status_code == 200
    assert client.patch(f"/api/v1/records/{rid}/", {"rationale": "x"}, format="json").status_code == 400
    for role in ("business", "platform", "security"):
        owner = APIClient()
        owner.force_authenticate(owners[role])
        assert (
            owner.post(f"/api/v1/records/{rid}/", {"action": "approve", "role": role}, format="json").status_code == 200
        )
    for role in ("business", "platform", "security"):
        owner = APIClient()
        owner.force_authenticate(owners[role])
        with dev_certs.pkcs12[role].open("rb") as handle:
            response = owner.post(
                f"/api/v1/records/{rid}/sign/", {"role": role, "pkcs12": handle, "passphrase": PASSPHRASE}
            )
        assert response.status_code == 200, response.json()
    assert response.json()["status"] == "signed"
    pdf = b"".join(client.get(f"/api/v1/records/{rid}/pdf/").streaming_content)
    from django.core.files.uploadedfile import SimpleUploadedFile

    report = client.post("/api/v1/records/verify/", {"file": SimpleUploadedFile("r.pdf", pdf)}).json()
    assert report["all_ok"] and report["matches_known_record"] and len(report["signatures"]) == 3
    assert client.post("/api/v1/records/verify/", {"file": SimpleUploadedFile("x.pdf", b"hello")}).status_code == 400


def test_a_record_reviewed_in_chinese_has_a_chinese_snapshot(decided, architect):
    from django.utils import translation

    with translation.override("zh-hans"):
        record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    assert record.snapshot["record"]["language"] == "zh-hans"
    assert "升级引擎或模型前" in record.snapshot["rollout"]["kv_format_compatibility"]
    assert record.snapshot["constraints"][0]["value"].startswith("峰值")


def test_an_english_draft_stays_english_in_a_chinese_record_and_the_page_says_so(decided, architect, client):
    from django.utils import translation

    draft = create_draft(
        selection=decided,
        user=architect,
        decision="Choose vLLM for the support bot",
        rationale="Lowest TTFT at our peak load.",
        applies_to="EU region only",
    )
    with translation.override("zh-hans"):
        record = start_review(record=draft, user=architect)
    snapshot = record.snapshot
    assert snapshot["record"]["language"] == "zh-hans"
    assert snapshot["decision"]["summary"] == "Choose vLLM for the support bot"
    assert snapshot["decision"]["rationale"][0] == "Lowest TTFT at our peak load."
    assert snapshot["risk_boundary"]["applies_to"] == ["EU region only"]
    client.force_login(architect)
    body = client.get(f"/selections/{decided.pk}/records/{record.pk}/").content.decode()
    assert "data-record-language" in body and "This record is written in 简体中文" in body
    assert "stays exactly as its author wrote it" in body


def test_validation_results_carry_their_charts_at_the_percentile_each_run_reports(decided, architect):
    """Each run is drawn in the record by what its test measures: latency against load (at the
    percentile the run reports: p99 for an upload with only p99) for a load sweep, the drift for a
    soak, and KV usage over time; a single load point draws no line."""
    vllm_candidate = decided.candidates.get(engine__slug="vllm")
    sweep = BenchmarkRun.objects.get(candidate=vllm_candidate)
    RunPoint.objects.create(
        run=sweep,
        index=1,
        concurrency=400,
        achieved_concurrency=400,
        ttft_ms={"p95": 420.0},
        tpot_ms={"p95": 35.0},
        error_rate=0.0,
    )
    soak = BenchmarkRun.objects.create(
        candidate=vllm_candidate,
        test="stability",
        origin="upload",
        status="succeeded",
        evidence="MEASURED",
        params={"duration_s": 3600},
        timeseries={"kv_usage_ratio": [[0.0, 0.2], [1800.0, 0.5], [3600.0, 0.52]]},
    )
    for index, (label, p99) in enumerate((("first_window", 300.0), ("last_window", 330.0))):
        RunPoint.objects.create(run=soak, index=index, label=label, concurrency=64, ttft_ms={"p99": p99})
    single = BenchmarkRun.objects.get(candidate__engine__slug="sglang")
    single.points.update(ttft_ms={"p99": 640.0}, tpot_ms={"p99": 41.0})

    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    entries = {(e["test"], e["candidate"].split()[0]): e for e in record.snapshot["validation"]}
    sweep_entry = entries[("Concurrency stress", "vLLM")]
    soak_entry = entries[("Long-run stability", "vLLM")]
    single_entry = entries[("Concurrency stress", "SGLang")]
    assert [m["name"] for m in sweep_entry["metrics"]][:2] == ["TTFT p95", "TPOT p95"]
    assert [c["title"] for c in sweep_entry["charts"]] == ["TTFT and TPOT p95 per load point"]
    assert [c["title"] for c in soak_entry["charts"]] == ["Latency drift during the soak", "KV-cache usage over time"]
    assert [m["name"] for m in single_entry["metrics"]][:2] == ["TTFT p99", "TPOT p99"]
    assert single_entry["metrics"][0]["value"] == "640.0" and single_entry["charts"] == []
    svgs = [c["svg"] for e in (sweep_entry, soak_entry) for c in e["charts"]]
    assert all(svg.lstrip().startswith(("<?xml", "<svg")) for svg in svgs)


def test_owner_names_are_written_as_their_script_writes_them(decided, architect):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    names = {o["role"]: o["name"] for o in record.snapshot["owners"]}
    assert names["business"] == "张伟"  # first_name 伟, last_name 张


def test_signing_with_another_owners_key_is_refused(decided, architect, owners, dev_certs):
    """张伟 (business) tries the platform owner's PKCS#12: refused before anything is signed."""
    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    with pytest.raises(ValidationError) as excinfo:
        sign(
            record=record,
            user=owners["business"],
            role="business",
            pkcs12=dev_certs.pkcs12["platform"].read_bytes(),
            passphrase=PASSPHRASE,
        )
    message = excinfo.value.message_dict["pkcs12"][0]
    assert "Priya Raman" in message and "is not your enrolled signing certificate" in message and "张伟" in message
    record.refresh_from_db()
    assert not record.signed_pdf and not record.approvals.filter(signed_at__isnull=False).exists()


def test_the_snapshot_names_each_owners_certificate_and_signing_records_it(decided, architect, owners, dev_certs):
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    enrolled = {o["role"]: o["certificate_sha256"] for o in record.snapshot["owners"]}
    assert enrolled == {role: current_certificate(owners[role]).sha256 for role in owners}
    assert len(set(enrolled.values())) == 3 and all(o["development_certificate"] for o in record.snapshot["owners"])
    record = sign_all(approve_all(record, owners), owners, dev_certs)
    approvals = {a.role: a for a in record.approvals.all()}
    assert {role: a.certificate_sha256 for role, a in approvals.items()} == enrolled
    assert all(a.development_certificate for a in approvals.values())


def test_an_owner_without_an_enrolled_certificate_blocks_the_review(decided, architect, owners):
    SigningCertificate.objects.filter(user=owners["security"]).update(replaced_at=timezone.now())
    with pytest.raises(ValidationError) as excinfo:
        start_review(record=create_draft(selection=decided, user=architect), user=architect)
    assert any("has no enrolled signing certificate" in p for p in excinfo.value.message_dict["snapshot"])


def test_the_drafter_never_owns_security(decided, architect, owners):
    """The security owner cannot draft; an architect who drafted cannot approve, sign or send to
    review as security owner (separation of duties)."""
    Membership.objects.filter(user=owners["security"]).update(role=Membership.Role.ARCHITECT)
    with pytest.raises(PermissionDenied, match="You are this selection's security owner"):
        create_draft(selection=decided, user=owners["security"])
    first = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    second = create_draft(selection=decided, user=architect)
    update_selection(selection=decided, user=architect, security_owner=architect)  # moved mid-review
    with pytest.raises(PermissionDenied, match="You drafted record v1: someone else must approve it"):
        approve(record=first, user=architect, role="security")
    with pytest.raises(ValidationError) as excinfo:
        start_review(record=second, user=architect)
    # issue 37 ("code where words belong"): the refusal names the person in words, not a field id
    drafted = (
        f"{person_name(architect)} drafted this record and is its security owner: another person must own security"
    )
    assert any(p.startswith(drafted) for p in excinfo.value.message_dict["snapshot"])


def test_a_record_signed_by_a_non_owner_fails_verification_per_field(decided, architect, owners, dev_certs):
    """A copy of the rendered record with the business field signed with Priya Raman's key (outside
    kvselect, which refuses it): intact, valid and trusted, but verification names the field and fails."""
    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    record = render_pdf(record)
    pdf = record.pdf.open("rb").read()
    for role, key in (("business", "platform"), ("platform", "platform"), ("security", "security")):
        pdf = signing.sign_pdf(pdf, dev_certs.pkcs12[key].read_bytes(), PASSPHRASE, role, role, role, "approve")
    report = verification_report(pdf)
    business, platform, security = report["signatures"]
    assert report["record"]["version"] == record.version and report["record"]["exact"] is False
    assert report["owners_checked"] and not report["all_ok"] and not report["procurement_ready"]
    assert business["intact"] and business["valid"] and business["trusted"]
    assert business["signed_by_owner"] is False and business["expected_signer"] == "张伟" and not business["ok"]
    assert platform["signed_by_owner"] and security["signed_by_owner"]


def test_a_timestamped_b_lt_record_verifies_offline_and_names_its_trust(
    decided, architect, owners, dev_certs, settings, tmp_path, capsys
):
    settings.KVSELECT_TSA_URL = "dev"
    settings.KVSELECT_DEV_CA_DIR = str(dev_certs.ca_certificate.parent)  # its CRL is embedded, its TSA stamps
    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    record = sign_all(record, owners, dev_certs)
    pdf = record.signed_pdf.open("rb").read()
    report = verification_report(pdf)  # offline: revocation data from the document's DSS only
    assert report["all_ok"] and report["owners_checked"], report
    assert [s["level"] for s in report["signatures"]] == ["B-LT"] * 3
    assert {s["trust_root"] for s in report["signatures"]} == {signing.DEV_CA_COMMON_NAME}
    assert all(s["development_certificate"] and s["timestamp"] for s in report["signatures"])
    assert report["simulated"] is False and report["procurement_ready"] is False  # measured, but a development CA
    path = tmp_path / "record.pdf"
    path.write_bytes(pdf)
    call_command("verify-record", str(path))
    out = capsys.readouterr().out
    assert "level: B-LT (timestamp" in out and f"trust root: {signing.DEV_CA_COMMON_NAME}" in out
    assert "DEVELOPMENT CERTIFICATE - NOT FOR PROCUREMENT" in out and "ready for procurement: no" in out
    assert out.count("owner: signed by the named owner") == 3


def test_the_overload_run_joins_the_record_after_the_five_with_its_step_chart(decided, architect):
    """Test 6 is listed in the articles' order after the stability test; its metrics are the top
    step's (not the recovery step's), and a stress's traffic-group points do not replace its load."""
    vllm_candidate = decided.candidates.get(engine__slug="vllm")
    stress = BenchmarkRun.objects.get(candidate=vllm_candidate)
    RunPoint.objects.create(
        run=stress, index=1, label="long", concurrency=200, ttft_ms={"p95": 9999.0}, extra={"traffic_group": "long"}
    )
    overload = BenchmarkRun.objects.create(
        candidate=vllm_candidate,
        test="overload",
        origin="harness",
        status="succeeded",
        evidence="MEASURED",
        verdicts=[{"name": "overload_handled_gracefully", "status": "pass", "detail": "queueing", "n": 90}],
    )
    steps = (("↑ c=32", "up", 340.0, 0), ("↑ c=96", "up", 1850.0, 3), ("↓ c=32", "down", 360.0, 0))
    for index, (label, direction, ttft, failed) in enumerate(steps):
        RunPoint.objects.create(
            run=overload,
            index=index,
            label=label,
            concurrency=96 if "96" in label else 32,
            ttft_ms={"p95": ttft},
            tpot_ms={"p95": 40.0},
            error_rate=0.0,
            requests_failed=failed,
            extra={"direction": direction, "failures_by_kind": {"rejected": 0}},
        )
    record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    tests = [e["test"] for e in record.snapshot["validation"] if e["candidate"].startswith("vLLM")]
    assert tests[-1] == "Overload and rejection"
    entries = {(e["test"], e["candidate"].split()[0]): e for e in record.snapshot["validation"]}
    entry = entries[("Overload and rejection", "vLLM")]
    assert entry["metrics"][0] == {"name": "TTFT p95", "value": "1850.0", "unit": "ms", "n": None, "interval": ""}
    assert "Overload: the way up and down" in [c["title"] for c in entry["charts"]]
    assert entries[("Concurrency stress", "vLLM")]["metrics"][0]["value"] != "9999.0"


def test_signing_refusals_read_in_the_owners_language(decided, architect, owners, dev_certs):
    """Walk m11: the owner-side signing refusals were English on Chinese pages."""
    from django.utils import translation

    record = approve_all(start_review(record=create_draft(selection=decided, user=architect), user=architect), owners)
    with translation.override("zh-hans"):
        with pytest.raises(ValidationError) as another_key:
            sign(
                record=record,
                user=owners["business"],
                role="business",
                pkcs12=dev_certs.pkcs12["platform"].read_bytes(),
                passphrase=PASSPHRASE,
            )
        with pytest.raises(ValidationError) as wrong_passphrase:
            sign(
                record=record,
                user=owners["business"],
                role="business",
                pkcs12=dev_certs.pkcs12["business"].read_bytes(),
                passphrase="not-the-passphrase",
            )
        with pytest.raises(ValidationError) as out_of_order:
            sign(
                record=record,
                user=owners["platform"],
                role="platform",
                pkcs12=dev_certs.pkcs12["platform"].read_bytes(),
                passphrase=PASSPHRASE,
            )
    assert "不是您登记的签名证书" in another_key.value.message_dict["pkcs12"][0]
    assert wrong_passphrase.value.message_dict["pkcs12"][0].startswith("无法打开证书文件")
    assert out_of_order.value.message_dict["role"][0] == "下一位签名者是业务负责人（顺序：业务、平台、安全）。"


def test_a_chinese_records_stamps_read_in_chinese_whoever_signs_it(decided, architect, owners, dev_certs, tmp_path):
    """Walk p8: the stamps of a record written in 简体中文 read "Digitally signed (PAdES) business owner";
    they are written in the record's language (the owners here sign from English pages), each in the
    same CJK-capable face."""
    from django.utils import translation

    with translation.override("zh-hans"):
        record = start_review(record=create_draft(selection=decided, user=architect), user=architect)
    record = sign_all(approve_all(record, owners), owners, dev_certs)
    path = tmp_path / "signed.pdf"
    with record.signed_pdf.open("rb") as handle:
        path.write_bytes(handle.read())
    text = subprocess.run(["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, text=True).stdout
    assert text.count("已数字签名（PAdES）") == 3, text[-800:]
    assert all(label in text for label in ("业务负责人", "平台负责人", "安全负责人"))
    assert "Digitally signed" not in text and "business owner" not in text
