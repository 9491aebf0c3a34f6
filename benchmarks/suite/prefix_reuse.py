"""Test 4, prefix reuse: its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest


def _(text: str) -> str:  # named `_` so `makemessages` collects the texts; translated where shown
    return text


TEST = ValidationTest(
    "prefix_reuse",
    4,
    _("Prefix reuse"),
    _(
        "The same load of requests sharing a long system prompt on the engine with prefix caching on and on "
        "the candidate's caching-off endpoint (llama.cpp: cache_prompt false): peak KV tokens, TTFT and "
        "throughput of both against the capacity model's “every request allocates its own” figure. Without "
        "a caching-off endpoint the on-vs-off verdict is not exercised."
    ),
    _("KV memory with a shared prefix against every request allocating its own"),
    ("prefix_on_off", "kv_usage"),
    feeds=("memory",),
    demo={"requests": 64, "concurrency": 16},
)
