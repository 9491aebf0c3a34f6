"""The architect's whole flow in a real browser, on the live server, a real Celery worker and the simulator.

Log in; create a selection with three owners; fill the constraints; accept the scenario; add vLLM,
SGLang and llama.cpp candidates on simulator endpoints; run two validation tests and watch htmx
move their progress bars to done; create a CI token and upload a fixture result over HTTP with it;
compare (with SIMULATED evidence); draft a decision record, send it to review, approve and sign it
as each owner (the business owner on their own machine with kvselect-sign, the others with the
development CA's PKCS#12 form); download the PDF and verify it: three valid signatures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.e2e.conftest import OWNERS, PASSPHRASE, log_in
from tests.e2e.flow import accept_scenario, create_selection, fill_constraints, save_constraints
from tests.support.environment import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parent.parent / "benchmarks" / "formats" / "fixtures"
CANDIDATES = (
    ("vllm", "vLLM on the simulator"),
    ("sglang", "SGLang on the simulator"),
    ("llama-cpp", "llama.cpp on the simulator"),
)
SHORT_PARAMS = {
    "concurrency_stress": {
        "concurrency": "4",
        "duration_s": "4",
        "settle_s": "0.5",
        "warmup_s": "0",
        "ramp_up_s": "0",
        "input_tokens": "128",
        "output_tokens": "16",
        "abort_fraction": "0",
    },
    "prefix_reuse": {
        "requests": "16",
        "concurrency": "4",
        "prefix_tokens": "256",
        "suffix_tokens": "64",
        "output_tokens": "16",
    },
}


def wait_for_run_done(page, run_pk: int, timeout_ms: int = 90_000) -> str:
    """htmx polls the progress fragment every 2 s and swaps it; wait until the bar is gone (terminal)."""
    block = page.locator(f"#run-progress-{run_pk}")
    page.wait_for_function(
        """pk => { const el = document.getElementById('run-progress-' + pk);
                   return el && el.classList.contains('runprogress--done'); }""",
        arg=run_pk,
        timeout=timeout_ms,
    )
    return block.get_attribute("data-run-status")


@dataclass
class Flow:
    """What the phases of the flow share: the live server, the architect's page, the selection and what
    each phase made (candidates, runs, the record), and the owners' development certificates."""

    base: str
    page: Any
    new_page: Callable[[], Any]
    shot: Callable[[Any, str], Path]
    people: dict[str, Any]
    tmp_path: Path
    certs: Any
    enrolled: dict[str, Any]
    pk: int = 0
    candidates: dict[str, Any] = field(default_factory=dict)
    runs: dict[str, Any] = field(default_factory=dict)
    record_url: str = ""
    owner_pages: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def lap(self, name: str) -> None:
        self.timings[name] = time.monotonic() - self.started


def test_the_whole_flow_in_the_browser(
    live_server, celery_worker_process, people, signed_records_cleanup, simulators, new_page, shot, settings, tmp_path
):
    from selection.candidates.services import load_engine_catalog
    from selection.certificates.services import enrol_certificate
    from selection.certificates.signing import issue_dev_certificates, pkcs12_certificate

    load_engine_catalog()
    certs = issue_dev_certificates(tmp_path / "certs", {role: full for role, (_u, full) in OWNERS.items()}, PASSPHRASE)
    settings.KVSELECT_TRUST_ROOTS = [str(certs.ca_certificate)]
    # Each owner enrols their signing certificate before the record goes to review: the platform and
    # security owners here, the business owner on the profile page (enrol_on_the_profile_page).
    enrolled = {role: pkcs12_certificate(certs.pkcs12[role].read_bytes(), PASSPHRASE) for role in OWNERS}
    for role in ("platform", "security"):
        enrol_certificate(user=people[role], certificate=enrolled[role].pem.encode())
    flow = Flow(live_server.url, new_page(), new_page, shot, people, tmp_path, certs, enrolled)

    select_and_accept_the_scenario(flow)
    add_candidates_and_plan_capacity(flow, simulators)
    run_two_validation_tests(flow)
    upload_with_a_ci_token(flow)
    compare_with_simulated_evidence(flow)
    enrol_on_the_profile_page(flow)
    draft_review_and_approve(flow)
    sign_as_each_owner(flow)
    download_and_verify(flow)

    flow.page.goto(f"{flow.base}/")
    assert "Support chat" in flow.page.inner_text("main")
    shot(flow.page, "01-dashboard")
    flow.lap("total")
    print("e2e timings (cumulative s):", {k: round(v, 1) for k, v in flow.timings.items()})


def select_and_accept_the_scenario(flow: Flow) -> None:
    """1-2: log in, create the selection, fill the constraints one-pager, accept the inferred scenario."""
    page = flow.page
    log_in(page, flow.base, "alice")
    flow.pk = create_selection(page, flow.base, flow.people, "Support chat")
    assert "Next: fill in the constraints" in page.inner_text(".messages")
    fill_constraints(page)
    flow.shot(page, "02-constraints")
    scenario = save_constraints(page, flow.pk)
    assert page.locator(f"button:has-text('Accept scenario {scenario}')").count() == 1
    accept_scenario(page, flow.pk)
    assert f"Scenario {scenario} accepted" in page.inner_text(".messages")
    page.click("nav.tabs a:has-text('Scenario & weights')")
    assert "Accepted." in page.inner_text("p.ok")
    flow.shot(page, "03-scenario-weights")
    flow.lap("selection+constraints+scenario")


def add_candidates_and_plan_capacity(flow: Flow, simulators) -> None:
    """3: three candidates from the catalog on simulator endpoints; the capacity page's what-if re-plans in place."""
    from selection.models import Candidate, Engine

    page, base, pk = flow.page, flow.base, flow.pk
    for (slug, label), server in zip(CANDIDATES, simulators, strict=False):
        page.goto(f"{base}/selections/{pk}/candidates/")
        engine = Engine.objects.get(slug=slug)
        page.select_option("#id_engine", str(engine.pk))
        page.fill("#id_engine_version", engine.versions[0] if engine.versions else "")
        page.fill("#id_label", label)
        page.fill("#id_endpoint_url", server.url)
        page.fill("#id_metrics_url", server.url + "/metrics")
        page.fill("#id_model_name", "Llama-3.1-8B")  # a shipped config: the capacity model plans it
        page.fill("#id_gpu_model", "H100")
        page.click("button:has-text('Add candidate')")
        page.wait_for_load_state()
        assert page.locator("table.table th[scope=row]", has_text=label).count() == 1, page.inner_text("main")[:2000]
    flow.candidates = {c.engine.slug: c for c in Candidate.objects.filter(selection_id=pk).select_related("engine")}
    assert set(flow.candidates) == {"vllm", "sglang", "llama-cpp"}
    flow.shot(page, "04-candidates")

    page.goto(f"{base}/selections/{pk}/candidates/{flow.candidates['vllm'].pk}/capacity/")
    assert page.locator("section.verdict").count() == 1, page.inner_text("main")[:2000]
    assert (
        page.locator("section[aria-labelledby=chart-title] img, section[aria-labelledby=chart-title] svg").count() >= 1
    )
    with page.expect_response(lambda response: "kv_dtype=fp8" in response.url):
        page.select_option("#id_kv_dtype", "fp8")  # what-if: htmx re-plans in place, nothing is saved
    page.wait_for_function("() => /\\bfp8\\b/.test(document.querySelector('#capacity-plan').innerText)")
    assert page.locator("#capacity-plan section.verdict").count() == 1
    flow.shot(page, "05-capacity")
    flow.lap("candidates")


def run_two_validation_tests(flow: Flow) -> None:
    """4: two validation tests; htmx moves the progress bars to done without a reload."""
    from benchmarks.models import BenchmarkRun

    page, base, pk, runs = flow.page, flow.base, flow.pk, flow.runs
    order = (("prefix_reuse", "sglang"), ("concurrency_stress", "vllm"))  # the page left open watches the stress run
    for test, slug in order:
        candidate = flow.candidates[slug]
        page.goto(f"{base}/selections/{pk}/candidates/{candidate.pk}/validation/")
        form = page.locator(f"form[action$='/validation/{test}/start/']")
        for name, value in SHORT_PARAMS[test].items():
            field_ = form.locator(f"[name='{test}-{name}']")
            if field_.count():
                field_.fill(value)
        form.locator("[name$='-label']").fill(f"e2e {test}")
        form.locator("button[type=submit]").click()
        page.wait_for_url(re.compile(rf"/candidates/{candidate.pk}/validation/"))
        runs[test] = BenchmarkRun.objects.filter(candidate=candidate, test=test).latest("pk")
        page.wait_for_selector(f"#run-progress-{runs[test].pk}")

    # Stay on the stress run's page: htmx swaps the progress fragment in place (no reload, the marker
    # survives) from queued through running (a percentage above 0) to done.
    stress = runs["concurrency_stress"].pk
    page.evaluate("window.__e2eNoReload = true")
    assert page.locator(f"#run-progress-{stress} [role=progressbar]").count() == 1
    page.wait_for_function(
        """pk => { const el = document.getElementById('run-progress-' + pk);
                   if (!el) return false;
                   if (el.classList.contains('runprogress--done')) return true;
                   const bar = el.querySelector('[role=progressbar]');
                   return el.dataset.runStatus === 'running' && bar && Number(bar.getAttribute('aria-valuenow')) > 0; }""",  # noqa: E501
        arg=stress,
        timeout=90_000,
    )
    flow.shot(page, "06-validation-progress")  # mid-run when the poll caught it running, else just finished
    assert wait_for_run_done(page, stress) == "succeeded", BenchmarkRun.objects.get(pk=stress).error
    assert page.evaluate("window.__e2eNoReload === true"), "the page reloaded: progress was not updated by htmx"
    assert page.locator(f"#run-progress-{stress} [role=progressbar]").count() == 0
    assert "View results" in page.inner_text(f"#run-progress-{stress}")
    page.goto(f"{base}/selections/{pk}/candidates/{flow.candidates['sglang'].pk}/validation/")
    assert wait_for_run_done(page, runs["prefix_reuse"].pk) == "succeeded"
    for run in runs.values():
        run.refresh_from_db()
        assert run.status == "succeeded" and run.evidence == "SIMULATED", (run.test, run.status, run.error)
    flow.lap("validation runs")

    page.click(f"#run-progress-{runs['prefix_reuse'].pk} a:has-text('View results')")
    page.wait_for_url(re.compile(rf"/runs/{runs['prefix_reuse'].pk}/$"))
    assert "SIMULATED" in page.inner_text("main")
    page.goto(f"{base}/selections/{pk}/runs/{runs['concurrency_stress'].pk}/")
    assert "SIMULATED" in page.inner_text("main")
    flow.shot(page, "07-run")


def upload_with_a_ci_token(flow: Flow) -> None:
    """5: a CI token, then a fixture upload over HTTP with it (parsed, MEASURED, the token's last use shown)."""
    from benchmarks.models import BenchmarkRun

    page, base, pk = flow.page, flow.base, flow.pk
    page.goto(f"{base}/selections/{pk}/uploads/")
    page.fill("#id_name", "nightly-ci")
    page.click("button:has-text('Create token')")
    page.wait_for_selector("[data-new-token]")
    raw_token = page.input_value("#raw-token")
    assert len(raw_token) >= 20
    flow.shot(page, "08-ci-token")
    upload_url = f"{base}/api/v1/candidates/{flow.candidates['vllm'].pk}/results/"
    assert upload_url.split(base)[1] in page.inner_text("#curl-example")
    status, body = post_multipart(
        upload_url, raw_token, {"test": "concurrency_stress", "label": "nightly"}, FIXTURES / "vllm_bench_serve.json"
    )
    assert status in (200, 201, 202), body
    uploaded = BenchmarkRun.objects.filter(candidate=flow.candidates["vllm"], origin="upload").latest("pk")
    deadline = time.monotonic() + 60
    while uploaded.status not in ("succeeded", "failed") and time.monotonic() < deadline:
        time.sleep(0.3)
        uploaded.refresh_from_db()
    assert uploaded.status == "succeeded" and uploaded.evidence == "MEASURED", uploaded.error
    page.goto(f"{base}/selections/{pk}/uploads/")  # not reload(): that would POST the token form again
    assert page.locator("table.table--compact th[scope=row]", has_text="nightly-ci").count() == 1
    assert "never" not in page.locator("table.table--compact tbody tr").first.inner_text()  # last used: now
    flow.lap("token+upload")


def compare_with_simulated_evidence(flow: Flow) -> None:
    """6: the comparison, SIMULATED evidence included, names every candidate."""
    page = flow.page
    page.goto(f"{flow.base}/selections/{flow.pk}/comparison/")
    page.check("input[name=simulated]")
    page.wait_for_url(re.compile(r"simulated=1"))
    comparison_text = page.inner_text("main")
    for _slug, label in CANDIDATES:
        assert label in comparison_text
    flow.shot(page, "09-comparison")


def enrol_on_the_profile_page(flow: Flow) -> None:
    """7a: the business owner enrols their certificate (public part only) on the profile page."""
    business = flow.new_page()
    log_in(business, flow.base, OWNERS["business"][0])
    business.goto(f"{flow.base}/profile/")
    certificate_file = flow.tmp_path / "business.pem"
    certificate_file.write_text(flow.enrolled["business"].pem)
    business.set_input_files("input[name=certificate]", str(certificate_file))
    business.click("button:has-text('Enrol certificate')")
    business.wait_for_load_state()
    assert "Certificate enrolled" in business.inner_text(".messages")
    assert flow.enrolled["business"].sha256 in business.inner_text("main")
    flow.shot(business, "10a-signing-certificate")


def draft_review_and_approve(flow: Flow) -> None:
    """7b: draft -> review -> each owner approves with a comment."""
    from selection.models import DecisionRecord

    page, base, pk = flow.page, flow.base, flow.pk
    page.goto(f"{base}/selections/{pk}/records/")
    page.fill("#id_rationale", "Lowest TTFT at the target load; prefix reuse matters for our prompts.")
    page.check("#id_include_simulated")
    page.click("button:has-text('Create draft')")
    page.wait_for_url(re.compile(rf"/selections/{pk}/records/\d+/$"))
    record = DecisionRecord.objects.get(selection_id=pk)
    page.click("button:has-text('Send to review')")
    page.wait_for_load_state()
    record.refresh_from_db()
    assert record.status == "in_review", page.inner_text("main")[:2000]
    flow.record_url = f"{base}/selections/{pk}/records/{record.pk}/"
    for role, (username, _full) in OWNERS.items():
        flow.owner_pages[role] = owner = flow.new_page()
        log_in(owner, base, username)
        owner.goto(flow.record_url)
        owner.fill(f"#approve-comment-{role}", f"{role} owner: agreed")
        owner.click(f"form:has(input[name=role][value={role}]) button[type=submit]")
        owner.wait_for_load_state()
        assert owner.locator(".messages").count() == 1
    record.refresh_from_db()
    assert record.status == "approved"
    flow.lap("draft+review+approve")


def sign_as_each_owner(flow: Flow) -> None:
    """7c: the business owner signs on their own machine (the page prepares the revision, kvselect-sign
    signs what it offers with the local PKCS#12, the page takes the CMS back: the key never travels);
    the platform and security owners use the development CA's PKCS#12 form."""
    from selection.models import DecisionRecord

    for role in OWNERS:
        owner = flow.owner_pages[role]
        owner.goto(flow.record_url)
        if role == "business":
            sign_on_the_owners_machine(flow, owner)
        else:
            owner.wait_for_selector("form.signform")
            owner.set_input_files("form.signform input[type=file]", str(flow.certs.pkcs12[role]))
            owner.fill("form.signform input[type=password]", PASSPHRASE)
            owner.click("form.signform button:has-text('Sign')")
            owner.wait_for_load_state()
        signed_fields = owner.locator(f"#sign input[name=role][value={role}]").count()
        assert signed_fields == 0, owner.inner_text("main")[:2000]
    record = DecisionRecord.objects.get(selection_id=flow.pk)
    assert record.status == "signed"
    flow.lap("sign x3")


def sign_on_the_owners_machine(flow: Flow, owner) -> None:
    owner.click("#sign button:has-text('Prepare my signature')")
    owner.wait_for_load_state()
    with owner.expect_download() as download_info:
        owner.click("#sign a:has-text('Download what to sign')")
    request_file = flow.tmp_path / "signature-request.json"
    download_info.value.save_as(request_file)
    signature = flow.tmp_path / "signature.p7s"
    # the owner's machine: its own process, the command as installed (its source tree here), the key local
    client = ROOT / "clients" / "kvselect-sign" / "src"
    env = dict(os.environ, PYTHONPATH=str(client), KVSELECT_PKCS12_PASSPHRASE=PASSPHRASE)
    argv = ["--request", str(request_file), "--out", str(signature), "--pkcs12", str(flow.certs.pkcs12["business"])]
    done = subprocess.run(
        [sys.executable, "-m", "kvselect_sign", *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    owner.set_input_files("#sign input[name=cms]", str(signature))
    owner.click("#sign button:has-text('Upload the signature')")
    owner.wait_for_load_state()


def download_and_verify(flow: Flow) -> None:
    """7d: download the signed PDF and verify it as procurement: three valid signatures by the named owners."""
    owner = flow.owner_pages["security"]
    owner.goto(flow.record_url)
    shots = flow.shot(owner, "10-record").parent
    with owner.expect_download() as download_info:
        owner.click("a:has-text('Download signed PDF')")
    pdf_path = flow.tmp_path / "record.pdf"
    download_info.value.save_as(pdf_path)
    assert pdf_path.read_bytes().startswith(b"%PDF")
    # the record's first page, the one-page summary procurement reads (for the README; Poppler's pdftoppm)
    page_one = shots / "10b-record-page-1"
    subprocess.run(["pdftoppm", "-png", "-r", "80", "-f", "1", "-l", "1", "-singlefile", str(pdf_path), str(page_one)])
    assert page_one.with_suffix(".png").is_file()

    verifier = flow.new_page()
    log_in(verifier, flow.base, "paula")
    verifier.click("nav.topnav a:has-text('Verify a record')")
    verifier.wait_for_url(re.compile(r"/records/verify/$"))
    verifier.set_input_files("input[type=file]", str(pdf_path))
    verifier.click("button:has-text('Verify')")
    verifier.wait_for_selector(".verdict--ok, .verdict--bad")
    verdict = verifier.inner_text("main")
    assert "All 3 signatures are intact, valid, trusted and by the named owners." in verdict, verdict[:3000]
    assert "development certificate — not for procurement" in verdict and "SIMULATED" in verdict
    assert "This is exactly the record kvselect issued" in verdict
    for _username, full in OWNERS.values():
        assert full in verdict
    flow.shot(verifier, "11-verify")


def post_multipart(url: str, token: str, fields: dict[str, str], path: Path) -> tuple[int, str]:
    """A CI job's upload: multipart/form-data with `Authorization: Token ...`, as the curl example does."""
    boundary = uuid.uuid4().hex
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{path.name}"\r\n'
        "Content-Type: application/json\r\n\r\n".encode()
        + path.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    request = urllib.request.Request(
        url,
        data=b"".join(parts),
        method="POST",
        headers={
            "Authorization": f"Token {token}",
            "Idempotency-Key": f"e2e-{boundary}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # the live server
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
