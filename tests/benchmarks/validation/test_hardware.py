"""One validation at a time per GPU pool, engine host and simulated GPU: a run needing hardware another
live run holds waits and says which run holds it; a finished run records what else ran beside it."""

import contextlib
from datetime import timedelta
from functools import partial

import pytest
from django.utils import timezone

from benchmarks.models import BenchmarkRun
from benchmarks.presentation import progress_view, run_notes
from benchmarks.result import NormalizedResult
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.server import start_server
from benchmarks.validation import hardware
from benchmarks.validation.dispatch import start_validation
from benchmarks.validation.worker import HardwareBusy, claim, overlapping_runs, record_host_activity
from selection.i18n import message_text
from selection.setup.services import create_selection, save_constraints
from tests.e2e import pagechecks
from tests.support.builders import SAMPLE_CONSTRAINTS, mock_engine_candidate
from tests.support.servers import ThreadedServer

SHORT = {"concurrency": 2, "duration_s": 1.0, "warmup_s": 0.0, "input_tokens": 16, "output_tokens": 8}


def test_keys_name_the_pool_and_every_engine_host():
    keys = hardware.hardware_keys(
        gpu_pool="A100",
        urls=["http://10.0.0.7:8000", "http://10.0.0.7:8000/metrics", "http://Gpu-Node-2:8001", "", None],
        machine="worker-1",
    )
    assert keys == ["host:10.0.0.7", "host:gpu-node-2", "pool:a100"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "127.0.1.1"])
def test_a_loopback_engine_is_on_the_workers_machine(host):
    keys = hardware.hardware_keys(gpu_pool="", urls=[f"http://{host}:8000"], machine="Node-A")
    assert keys == ["host:node-a"]
    other = hardware.hardware_keys(gpu_pool="", urls=[f"http://{host}:8000"], machine="node-b")
    assert hardware.shared(keys, other) == []  # two machines' loopbacks are different hardware


def test_a_simulator_is_keyed_by_its_simulated_gpu_not_by_the_host_it_listens_on():
    devices = {"http://127.0.0.1:8101": "kvsim-A", "http://127.0.0.1:8111": "kvsim-B"}
    urls = [
        "http://127.0.0.1:8101/v1",
        "http://127.0.0.1:8101/metrics",
        "http://127.0.0.1:8111",
        "http://127.0.0.1:9400",
    ]
    keys = hardware.hardware_keys(gpu_pool="", urls=urls, machine="m1", devices=devices)
    # the exporter on another port is not the simulator: it stays the machine's (conservative)
    assert keys == ["host:m1", "simulated:kvsim-a", "simulated:kvsim-b"]
    only = hardware.hardware_keys(gpu_pool="", urls=urls[:3], machine="m1", devices=devices)
    other = hardware.hardware_keys(gpu_pool="", urls=["http://127.0.0.1:8102"], machine="m1", devices={})
    assert hardware.shared(only, other) == [] and other == ["host:m1"]
    # a real engine on the same machine as a simulator: other hardware (the simulator has no GPU)
    assert hardware.origin_of("HTTP://LocalHost/v1") == "http://localhost:80"


@contextlib.asynccontextmanager
async def simulator(**settings):
    server = await start_server(SimConfig(num_blocks=600, max_model_len=4096, **settings))
    try:
        yield server
    finally:
        await server.stop()


def test_runs_on_two_simulators_of_one_machine_run_at_once_and_one_simulator_runs_one(
    selection_with_constraints, architect, engines, settings, client, mock_engine
):
    """Each simulator names its simulated GPU (asked at the claim): two simulators on 127.0.0.1 load no
    common GPU; two candidates on one simulator take turns; a real engine on 127.0.0.1 still holds the
    worker's machine."""
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1"]
    with ThreadedServer(lambda: simulator()) as one, ThreadedServer(lambda: simulator()) as two:
        first = _candidate(selection_with_constraints, architect, engines, one.url)
        second = _candidate(selection_with_constraints, architect, engines, two.url)
        again = _candidate(selection_with_constraints, architect, engines, one.url + "/v1")
        real = _candidate(selection_with_constraints, architect, engines, mock_engine.url)
        runs = [
            start_validation(candidate=c, test="concurrency_stress", user=architect, params=SHORT)
            for c in (first, second, again, real)
        ]
        a, b = claim(runs[0].pk, "w1", machine="m1"), claim(runs[1].pk, "w2", machine="m1")
        device = one.state.config.device
        assert a.hardware == [f"simulated:{device}"] and b.hardware == [f"simulated:{two.state.config.device}"]
        with pytest.raises(HardwareBusy) as busy:
            claim(runs[2].pk, "w3", machine="m1")
        assert busy.value.holder["run"] == a.pk and busy.value.holder["hardware"] == [f"simulated:{device}"]
        assert claim(runs[3].pk, "w4", machine="m1").hardware == ["host:m1"]
    client.force_login(architect)
    page = client.get(f"/selections/{again.selection_id}/runs/{runs[2].pk}/progress/")
    text = " ".join(page.content.decode().split())
    assert f"it is using simulated GPU {device}." in text
    BenchmarkRun.objects.filter(pk__in=[r.pk for r in runs]).update(status="succeeded", finished_at=timezone.now())


def _candidate(selection, user, engines, url, pool=""):
    return mock_engine_candidate(selection, user, engines["vllm"], url, gpu_pool=pool, label=url.split("//")[1])


@pytest.fixture
def on_one_host(selection_with_constraints, architect, engines, settings):
    """Two candidates of one selection served from the same host (two ports)."""
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1", "gpu-a", "gpu-b"]
    first = _candidate(selection_with_constraints, architect, engines, "http://127.0.0.1:18001")
    second = _candidate(selection_with_constraints, architect, engines, "http://127.0.0.1:18002")
    return first, second


def test_a_run_on_a_host_another_run_holds_waits_and_names_it(on_one_host, architect):
    first, second = on_one_host
    a = start_validation(candidate=first, test="concurrency_stress", user=architect, params=SHORT)
    b = start_validation(candidate=second, test="concurrency_stress", user=architect, params=SHORT)
    held = claim(a.pk, "celery@m1:t1", machine="m1")
    assert held is not None and held.hardware == ["host:m1"]
    with pytest.raises(HardwareBusy) as busy:
        claim(b.pk, "celery@m1:t2", machine="m1")
    assert busy.value.holder["run"] == a.pk
    b.refresh_from_db()
    assert b.status == "queued"
    waiting = b.progress["waiting_for"]
    assert waiting["run"] == a.pk and waiting["candidate"] == first.display_name and waiting["hardware"] == ["host:m1"]
    view = progress_view(b.progress, b.status, False)["waiting_for"]
    assert view["hardware"] == [{"kind": "host", "name": "m1"}] and view["test"] == "concurrency_stress"
    # another machine's loopback is other hardware: it runs at once
    assert claim(b.pk, "celery@m2:t3", machine="m2") is not None
    BenchmarkRun.objects.filter(pk__in=[a.pk, b.pk]).update(status="succeeded", finished_at=timezone.now())


def test_the_hardware_frees_when_its_run_ends_or_its_worker_dies(on_one_host, architect):
    first, second = on_one_host
    a = start_validation(candidate=first, test="concurrency_stress", user=architect, params=SHORT)
    b = start_validation(candidate=second, test="prefix_reuse", user=architect)
    claim(a.pk, "w1", machine="m1")
    with pytest.raises(HardwareBusy):
        claim(b.pk, "w2", machine="m1")
    BenchmarkRun.objects.filter(pk=a.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert claim(b.pk, "w2", machine="m1") is not None  # a dead worker's hold ends with its heartbeat


def test_a_gpu_pool_runs_one_validation_at_a_time(selection_with_constraints, architect, engines, settings):
    settings.KVSELECT_ALLOWED_TARGETS = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    first = _candidate(selection_with_constraints, architect, engines, "http://10.0.0.1:8000", pool="h100")
    second = _candidate(selection_with_constraints, architect, engines, "http://10.0.0.2:8000", pool="h100")
    third = _candidate(selection_with_constraints, architect, engines, "http://10.0.0.3:8000", pool="a100")
    runs = [start_validation(candidate=c, test="concurrency_stress", user=architect) for c in (first, second, third)]
    assert claim(runs[0].pk, "w1", machine="m1").hardware == ["host:10.0.0.1", "pool:h100"]
    with pytest.raises(HardwareBusy) as busy:
        claim(runs[1].pk, "w2", machine="m2")
    assert busy.value.holder["hardware"] == ["pool:h100"]
    assert claim(runs[2].pk, "w3", machine="m3") is not None  # another pool, another host


def test_another_teams_run_is_named_without_its_candidate(on_one_host, architect, make_user, team, engines):
    first, _second = on_one_host
    owners = {role: make_user(f"{role}-2", team, "reviewer") for role in ("business", "platform", "security")}
    other = create_selection(
        user=architect,
        team=team,
        name="other",
        business_owner=owners["business"],
        platform_owner=owners["platform"],
        security_owner=owners["security"],
    )
    save_constraints(selection=other, user=architect, data=dict(SAMPLE_CONSTRAINTS))
    stranger = _candidate(other, architect, engines, "http://127.0.0.1:18009")
    a = start_validation(candidate=first, test="concurrency_stress", user=architect, params=SHORT)
    b = start_validation(candidate=stranger, test="concurrency_stress", user=architect, params=SHORT)
    claim(a.pk, "w1", machine="m1")
    with pytest.raises(HardwareBusy):
        claim(b.pk, "w2", machine="m1")
    b.refresh_from_db()
    assert b.progress["waiting_for"]["candidate"] is None and b.progress["waiting_for"]["other_selection"]


def test_a_run_records_what_ran_beside_it(on_one_host, architect, engines, selection_with_constraints, settings):
    first, second = on_one_host
    settings.KVSELECT_ALLOWED_TARGETS = ["127.0.0.1", "10.0.0.9"]
    far = _candidate(selection_with_constraints, architect, engines, "http://10.0.0.9:9000")
    now = timezone.now()
    run = start_validation(candidate=first, test="stability", user=architect, params={"duration_s": 60.0})
    BenchmarkRun.objects.filter(pk=run.pk).update(
        status="running", started_at=now - timedelta(seconds=60), hardware=["host:m1"], worker="celery@m1:t1"
    )
    beside = start_validation(candidate=far, test="concurrency_stress", user=architect, params=SHORT)
    BenchmarkRun.objects.filter(pk=beside.pk).update(  # another engine host, driven from the same client
        status="succeeded",
        started_at=now - timedelta(seconds=50),
        finished_at=now - timedelta(seconds=20),
        hardware=["host:10.0.0.9"],
        worker="celery@m1:t2",
    )
    before = start_validation(candidate=second, test="prefix_reuse", user=architect)
    BenchmarkRun.objects.filter(pk=before.pk).update(  # ended before this run began: not beside it
        status="succeeded",
        started_at=now - timedelta(seconds=300),
        finished_at=now - timedelta(seconds=200),
        hardware=["host:m1"],
        worker="celery@m1:t0",
    )
    run.refresh_from_db()
    found = overlapping_runs(run, now)
    assert [item["run"] for item in found] == [beside.pk]
    assert found[0]["same_load_client"] and found[0]["shared_hardware"] == [] and found[0]["overlap_s"] == 30.0
    result = NormalizedResult(tool="kvselect", format="native")
    record_host_activity(run, result, [0.1, 0.1, 0.1])
    activity = result.metadata["host_activity"]
    assert activity["hardware"] == ["host:m1"] and activity["load_client"] == "celery@m1"
    assert activity["overlapping_runs"][0]["run"] == beside.pk
    assert any(f"Run {beside.pk} (concurrency_stress) ran beside this one" in note for note in result.notes)
    # a page names the test by its title in its own language, never by its id (the API's English keeps it)
    english, chinese = (
        " ".join(run_notes(result.notes, result.metadata, partial(message_text, language=language)))
        for language in ("en", "zh-hans")
    )
    assert f"Run {beside.pk} (Concurrency stress) ran beside this one" in english
    assert pagechecks.identifiers(english) == [] and pagechecks.identifiers(chinese) == [], (english, chinese)
    assert "并发压力" in chinese and pagechecks.english_words(chinese) == [], chinese


def test_a_run_alone_on_its_hardware_records_that_nothing_overlapped(on_one_host, architect):
    first, _second = on_one_host
    run = start_validation(candidate=first, test="stability", user=architect, params={"duration_s": 60.0})
    BenchmarkRun.objects.filter(pk=run.pk).update(
        status="running", started_at=timezone.now(), hardware=["host:m1"], worker="celery@m1:t1"
    )
    run.refresh_from_db()
    result = NormalizedResult(tool="kvselect", format="native")
    record_host_activity(run, result, None)
    assert result.metadata["host_activity"]["overlapping_runs"] == []
    assert not any("ran beside" in note for note in result.notes)


def test_the_run_page_says_which_run_a_queued_run_waits_for(on_one_host, architect, client):
    first, second = on_one_host
    a = start_validation(candidate=first, test="concurrency_stress", user=architect, params=SHORT)
    b = start_validation(candidate=second, test="concurrency_stress", user=architect, params=SHORT)
    claim(a.pk, "w1", machine="m1")
    with pytest.raises(HardwareBusy):
        claim(b.pk, "w2", machine="m1")
    client.force_login(architect)
    page = client.get(f"/selections/{second.selection_id}/runs/{b.pk}/progress/")
    assert page.status_code == 200, page.status_code
    text = " ".join(page.content.decode().split())
    assert f"Waiting for run #{a.pk} (Concurrency stress, {first.display_name}) to finish: it is using host m1." in text


def test_a_candidates_runs_start_in_the_order_they_were_queued(on_one_host, architect):
    """Walk p-a: a stability run queued last ran before the prefix and swap runs queued earlier."""
    first, _second = on_one_host
    earlier = start_validation(candidate=first, test="concurrency_stress", user=architect, params=SHORT)
    later = start_validation(candidate=first, test="prefix_reuse", user=architect)
    with pytest.raises(HardwareBusy) as busy:
        claim(later.pk, "w2", machine="m1")  # its task retried first: the earlier run goes first
    assert busy.value.holder["run"] == earlier.pk and busy.value.holder["candidate"] == first.display_name
    assert claim(earlier.pk, "w1", machine="m1") is not None
    BenchmarkRun.objects.filter(pk=earlier.pk).update(status="succeeded", finished_at=timezone.now())
    assert claim(later.pk, "w2", machine="m1") is not None
    BenchmarkRun.objects.filter(pk=later.pk).update(status="succeeded", finished_at=timezone.now())
