"""Prefix sharing within a KV pool: an LRU cache of 512-token blocks replayed over the trace, checked
against a brute-force recency computation over small random traces, and on sessions and prefix groups."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.traces.formats import read_trace, write_kvselect_csv
from benchmarks.traces.stats import trace_statistics


def brute_force(requests, capacity_blocks):
    """The blocks in the cache are the `capacity` most recently touched ones (touch order: a request's
    blocks from its last to its first); the hit is the leading run of the prompt's whole blocks."""
    last_touch: dict = {}
    clock = 0
    shared = 0
    for index, (ids, input_tokens, output_tokens) in enumerate(requests):
        ranked = sorted(last_touch, key=lambda key: -last_touch[key])[:capacity_blocks]
        cached_now = set(ranked)
        prompt = [("h", h) for h in ids[: input_tokens // 512]]
        hits = 0
        for key in prompt:
            if key not in cached_now:
                break
            hits += 1
        shared += hits * 512
        blocks = prompt + [("u", index, i) for i in range(len(prompt), (input_tokens + output_tokens) // 512)]
        for key in reversed(blocks):
            clock += 1
            last_touch[key] = clock
        if capacity_blocks == 0:
            last_touch.clear()
    return shared


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    requests=st.lists(
        st.tuples(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(0, 511), st.integers(1, 1200)),
        min_size=1,
        max_size=25,
    ),
    capacity_blocks=st.integers(0, 15),
    chunk_rows=st.integers(1, 9),
)
def test_the_pool_reuses_what_a_brute_force_lru_holds(tmp_path, requests, capacity_blocks, chunk_rows):
    rows = []
    for ids, short, output_tokens in requests:
        input_tokens = max(len(ids) * 512 - short, 1)
        rows.append((ids, input_tokens, output_tokens))
    path = tmp_path / "m.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i * 10, "input_length": n, "output_length": o, "hash_ids": ids}) + "\n"
            for i, (ids, n, o) in enumerate(rows)
        )
    )
    stats = trace_statistics(read_trace(path, chunk_rows=chunk_rows), kv_pools={"pool": capacity_blocks * 512})
    pool = stats["prefix"]["pools"]["pool"]
    assert pool["capacity_blocks"] == capacity_blocks
    assert pool["shared_tokens"] == brute_force(rows, capacity_blocks)
    assert pool["shared_tokens"] <= stats["prefix"]["input_tokens"]


def test_a_session_reuses_its_history_unless_a_flood_evicts_it(tmp_path):
    turns = [
        {"timestamp": 0, "session_id": "a", "input_tokens": 1100, "output_tokens": 500, "e2e_ms": 1000},
        {"timestamp": 30, "session_id": "a", "input_tokens": 1700, "output_tokens": 10, "e2e_ms": 1000},
    ]
    flood = [{"timestamp": 10 + i, "input_tokens": 2048, "output_tokens": 1, "e2e_ms": 500} for i in range(8)]
    quiet = tmp_path / "quiet.csv"
    write_kvselect_csv(quiet, turns)
    busy = tmp_path / "busy.csv"
    write_kvselect_csv(busy, sorted(turns + flood, key=lambda row: row["timestamp"]))
    pools = {"small": 8 * 512, "large": 1000 * 512}
    calm = trace_statistics(lambda: read_trace(quiet), kv_pools=pools)["prefix"]
    # (1100 + 500) // 512 = 3 whole blocks of history, the unbounded figure counts all 1600 tokens
    assert calm["shared_tokens"] == 1600
    assert calm["pools"]["small"]["shared_tokens"] == calm["pools"]["large"]["shared_tokens"] == 3 * 512
    flooded = trace_statistics(lambda: read_trace(busy), kv_pools=pools)["prefix"]
    assert flooded["pools"]["large"]["shared_tokens"] == 3 * 512
    assert flooded["pools"]["small"]["shared_tokens"] == 0  # 8 x 4 blocks of other prompts came between
    assert flooded["pools"]["small"]["evicted_blocks"] > 0


def test_a_prefix_group_is_reused_in_whole_blocks(tmp_path):
    rows = [
        {"timestamp": t, "input_tokens": 1500, "output_tokens": 5, "prefix_group": "sys", "prefix_tokens": 1200}
        for t in (0, 1, 2)
    ]
    path = tmp_path / "g.csv"
    write_kvselect_csv(path, rows)
    prefix = trace_statistics(lambda: read_trace(path), kv_pools={"pool": 64 * 512})["prefix"]
    assert prefix["shared_tokens"] == 2 * 1200  # unbounded: the whole prefix, partial block included
    assert prefix["pools"]["pool"]["shared_tokens"] == 2 * 2 * 512  # the engine reuses 2 whole blocks


def test_a_trace_without_prefix_data_has_no_pool_figure(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.98,4808,10\n")
    stats = trace_statistics(lambda: read_trace(path), kv_pools={"pool": 1 << 20})
    assert stats["prefix"]["sharing_ratio"] is None and stats["prefix"]["pools"] == {}


def test_candidates_with_the_same_pool_size_get_the_same_figure(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}\n'
        '{"timestamp": 5, "input_length": 1024, "output_length": 1, "hash_ids": [1, 3]}\n'
    )
    stats = trace_statistics(lambda: read_trace(path), kv_pools={"a": 4096, "b": 4096, "c": 0})
    pools = stats["prefix"]["pools"]
    assert pools["a"] == pools["b"] and pools["a"]["shared_tokens"] == 512 and pools["c"]["shared_tokens"] == 0
