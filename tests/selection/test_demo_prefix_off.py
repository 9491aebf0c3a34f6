"""The demo starts a caching-off simulator beside vLLM's and SGLang's (llama.cpp: cache_prompt false)
and gives each candidate the launch flags that enable the metrics the simulators export."""

import io
import urllib.request

from benchmarks.simulator.config import STRATEGIES
from selection.candidates.services import add_candidate
from selection.domain import launch_flags
from selection.management.commands.demo import DEMO_CANDIDATES, DEMO_LAUNCH_FLAGS, Command


def test_demo_simulators_include_a_prefix_caching_off_endpoint(selection_with_constraints, architect, engines):
    for slug, profile, _extra in DEMO_CANDIDATES:
        add_candidate(
            selection=selection_with_constraints,
            user=architect,
            data={
                "engine": engines[slug],
                "engine_version": engines[slug].versions[0],
                "label": profile,
                "launch_flags": DEMO_LAUNCH_FLAGS[slug],
            },
        )
    command = Command(stdout=io.StringIO())
    command.children = []
    try:
        command.start_simulators(selection_with_constraints)
        by_slug = {c.engine.slug: c for c in selection_with_constraints.candidates.select_related("engine")}
        for slug in ("vllm", "sglang"):
            off = by_slug[slug].prefix_off_endpoint_url
            assert off and off != by_slug[slug].endpoint_url
            with urllib.request.urlopen(off + "/metrics", timeout=5) as response:
                assert 'enable_prefix_caching="False"' in response.read().decode()
        assert by_slug["llama-cpp"].prefix_off_endpoint_url == ""  # cache_prompt: false on its own endpoint
        with urllib.request.urlopen(by_slug["vllm"].endpoint_url + "/metrics", timeout=5) as response:
            assert 'enable_prefix_caching="True"' in response.read().decode()
    finally:
        command.stop_children()


def test_each_demo_candidates_launch_flags_say_whether_its_simulator_offloads():
    """The catalog credits a CPU offload tier only when the launch flags enable it: a simulator that
    offloads idle sessions must be a candidate launched with offload, and only it (issue 27: the demo's
    persistence gate is passed by persistence itself, never by another criterion's credit). Two offload
    (vLLM's CPU tier, SGLang's hierarchical cache): the demo is a close decision between two candidates
    that can pass the persistence gate (issue 36 item 4)."""
    offloading = []
    for slug, profile, _extra in DEMO_CANDIDATES:
        state = launch_flags.feature_states(slug, DEMO_LAUNCH_FLAGS[slug])[launch_flags.OFFLOAD]
        assert bool(state.enabled) == STRATEGIES[profile]["offload"], (slug, profile, state)
        offloading += [slug] if state.enabled else []
    assert offloading == ["vllm", "sglang"]
