"""The record lifecycle's world, shared by the lifecycle, signing, operations, evidence-protection and
kvselect-sign tests: development certificates (a CJK business owner), a decided selection where vLLM
leads on measured concurrency-stress evidence, and the owners' approvals and signatures. The fixtures
(`dev_certs`, `decided`) are in tests/selection/records/conftest.py and tests/clients/conftest.py."""

from __future__ import annotations

from selection.candidates.services import add_candidate
from selection.certificates.signing import issue_dev_certificates
from selection.records.services import approve, sign
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
