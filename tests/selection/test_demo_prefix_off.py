"""The demo starts a caching-off simulator beside vLLM's and SGLang's (llama.cpp: cache_prompt false)
and gives each candidate the launch flags that enable the metrics the simulators export."""

import io
import urllib.request

from selection.candidates.services import add_candidate
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
