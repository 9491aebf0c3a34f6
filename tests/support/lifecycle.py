"""The record lifecycle's world, shared by the lifecycle, signing, operations, evidence-protection and
kvselect-sign tests: development certificates (a CJK business owner), a decided selection where vLLM
leads on measured concurrency-stress evidence, and the owners' approvals and signatures. The fixtures
(`dev_certs`, `decided`) are in tests/selection/records/conftest.py and tests/clients/conftest.py."""

from __future__ import annotations

from selection.candidates.services import add_candidate
from selection.certificates.signing import issue_dev_certificates
from selection.records.services import approve, sign
from selection.scoring.services import compute_scores
from tests.support.builders import DEV_PASSPHRASE, chat_selection, enrol_owners, stress_run

PASSPHRASE = DEV_PASSPHRASE


def lifecycle_certs(out):
    """Development certificates of the three owners (the business owner's name in CJK)."""
    return issue_dev_certificates(
        out, {"business": "张伟", "platform": "Priya Raman", "security": "Jonas Berg"}, DEV_PASSPHRASE
    )


def lifecycle_selection(architect, team, owners, engines, dev_certs, settings):
    """A selection where vLLM leads sglang on measured concurrency stress, its owners enrolled."""
    owners["business"].first_name, owners["business"].last_name = "伟", "张"
    owners["business"].save()
    enrol_owners(owners, dev_certs, DEV_PASSPHRASE, settings)
    selection = chat_selection(architect, team, owners)
    for slug, ttft in (("vllm", 300.0), ("sglang", 500.0)):
        candidate = add_candidate(
            selection=selection,
            user=architect,
            data={"engine": engines[slug], "engine_version": engines[slug].versions[0]},
        )
        stress_run(candidate, (ttft,), concurrencies=(200,))
    selection.refresh_from_db()
    return selection


def tied_selection(architect, team, owners, engines, dev_certs, settings):
    """A selection whose two vLLM candidates ("vLLM A", "vLLM B") measured the same: the scores tie exactly (no
    winner), its owners enrolled."""
    owners["business"].first_name, owners["business"].last_name = "伟", "张"
    owners["business"].save()
    enrol_owners(owners, dev_certs, DEV_PASSPHRASE, settings)
    selection = chat_selection(architect, team, owners)
    for label in ("vLLM A", "vLLM B"):
        candidate = add_candidate(
            selection=selection,
            user=architect,
            data={"engine": engines["vllm"], "engine_version": engines["vllm"].versions[0], "label": label},
        )
        stress_run(candidate, (300.0,), concurrencies=(200,))
    selection.refresh_from_db()
    compute_scores(selection)  # the scores the rescoring task would have stored: a tie
    return selection


def sign_all(record, owners, dev_certs):
    for role in ("business", "platform", "security"):
        record = sign(
            record=record,
            user=owners[role],
            role=role,
            pkcs12=dev_certs.pkcs12[role].read_bytes(),
            passphrase=DEV_PASSPHRASE,
        )
    return record


def approve_all(record, owners):
    for role in ("business", "platform", "security"):
        record = approve(record=record, user=owners[role], role=role)
    return record
