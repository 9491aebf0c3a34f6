"""Command line of the simulator, shared by `python -m benchmarks.simulator` and
`python manage.py simulate`: serve over HTTP, or run a trace offline with `--trace`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from benchmarks.simulator.config import (
    DEFAULT_MODEL,
    GPU_PROFILES,
    SCHEDULING_POLICIES,
    STRATEGIES,
    SimConfig,
    SimConfigError,
)
from benchmarks.simulator.engine_streams import SHAPES
from benchmarks.traces.formats import FORMATS as TRACE_FORMATS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", default="paged-prefix", choices=sorted(STRATEGIES), help="allocation strategy")
    parser.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        help="a shipped model config (Llama-3.1-70B, Qwen2.5-7B, ...; see `manage.py kvcapacity`): the KV size, "
        "weights and block pool come from it with vLLM's rules; any other name needs --kv-bytes-per-token",
    )
    parser.add_argument("--tp", type=int, default=1, help="tensor parallelism the shipped config is sharded over")
    parser.add_argument("--kv-dtype", default="bf16", choices=("bf16", "fp8"), help="KV-cache precision")
    parser.add_argument("--gpu", default="H100", choices=sorted(GPU_PROFILES))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--time-scale", type=float, default=1.0, help="simulated seconds per wall second (live)")
    parser.add_argument("--num-blocks", type=int, default=None, help="KV blocks (default: from GPU memory)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-bytes-per-token", type=int, default=None)
    parser.add_argument("--weight-bytes", type=int, default=None)
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=131072,
        help="context limit; the static profile pre-allocates this per slot",
    )
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--preemption-mode", default="recompute", choices=("recompute", "swap"))
    parser.add_argument("--reject-policy", default="queue", choices=("queue", "429"))
    parser.add_argument("--max-waiting", type=int, default=None)
    parser.add_argument(
        "--oom-without-admission",
        default=None,
        choices=("fail", "crash"),
        help="no admission control: an exhausted KV pool fails the request with OOM (fail) or kills the engine (crash)",
    )
    parser.add_argument("--offload-after-s", type=float, default=5.0)
    parser.add_argument(
        "--no-prefix-caching",
        dest="prefix_caching",
        action="store_false",
        help="turn the prefix cache off (as vLLM --no-enable-prefix-caching, SGLang --disable-radix-cache): "
        "the prefix-reuse test's caching-off endpoint",
    )
    parser.add_argument(
        "--fault-corrupt-swapped-in",
        action="store_true",
        help="fault: a request whose KV comes back from the CPU tier generates wrong tokens (swap test's fail case)",
    )
    parser.add_argument(
        "--scheduling-policy",
        default="fcfs",
        choices=SCHEDULING_POLICIES,
        help="fcfs, or priority: a request's lower `priority` field is served first (vLLM's flag)",
    )
    parser.add_argument(
        "--restart-downtime-s",
        type=float,
        default=1.0,
        help="POST /admin/restart: wall seconds the engine is down while it restarts",
    )
    parser.add_argument(
        "--abrupt-restart",
        action="store_true",
        help="POST /admin/restart cuts in-flight requests and answers 503 until back (default: graceful)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--engine-version",
        default="kvsim",
        help="the engine version GET /version and kvsim_build_info report (the version it stands in for)",
    )
    parser.add_argument(
        "--served-model-name",
        default=None,
        help="the model id /v1/models lists and requests must send (default: kvsim-<model>)",
    )
    parser.add_argument(
        "--fault-kv-leak-blocks-per-request",
        type=int,
        default=0,
        help="fault: KV blocks each finished request never returns (a leak the stability test must catch)",
    )
    parser.add_argument(
        "--stream-shape",
        default="vllm",
        choices=SHAPES,
        help="whose SSE stream to write, byte for byte (vllm, sglang or tgi)",
    )
    parser.add_argument(
        "--trace",
        default=None,
        help="run this trace offline instead of serving: the simulator's CSV/JSONL, or a production trace "
        "(kvselect, mooncake, azure, burstgpt)",
    )
    parser.add_argument(
        "--format", dest="trace_format", default=None, choices=sorted(TRACE_FORMATS), help="the trace's format"
    )
    parser.add_argument(
        "--speedup", type=float, default=1.0, help="offline: divide the trace's clock (2: twice the rate)"
    )
    parser.add_argument("--sample", type=int, default=None, help="offline: only the first N requests of the trace")
    parser.add_argument("--out", default=None, help="offline: write the native JSON result here")


def config_from_options(options: dict[str, Any]) -> SimConfig:
    values: dict[str, Any] = dict(
        profile=options["profile"],
        model=options["model"],
        gpu=options["gpu"],
        time_scale=options["time_scale"],
        num_blocks=options["num_blocks"],
        block_size=options["block_size"],
        max_model_len=options["max_model_len"],
        max_num_seqs=options["max_num_seqs"],
        max_num_batched_tokens=options["max_num_batched_tokens"],
        preemption_mode=options["preemption_mode"],
        reject_policy=options["reject_policy"],
        max_waiting=options["max_waiting"],
        oom_without_admission=options.get("oom_without_admission"),
        offload_after_s=options["offload_after_s"],
        prefix_caching=options.get("prefix_caching", True),
        fault_corrupt_swapped_in=bool(options.get("fault_corrupt_swapped_in")),
        scheduling_policy=options.get("scheduling_policy") or "fcfs",
        restart_downtime_s=options.get("restart_downtime_s", 1.0),
        restart_graceful=not options.get("abrupt_restart"),
        seed=options["seed"],
        fault_kv_leak_blocks_per_request=options.get("fault_kv_leak_blocks_per_request") or 0,
        stream_shape=options.get("stream_shape") or "vllm",
        engine_version=options.get("engine_version") or "kvsim",
        gpu_count=options.get("tp") or 1,
    )
    if options.get("kv_bytes_per_token") is not None:
        values["kv_bytes_per_token"] = options["kv_bytes_per_token"]
    if options.get("weight_bytes") is not None:
        values["weight_bytes"] = options["weight_bytes"]
    if options["model"] != DEFAULT_MODEL:
        values["served_model_name"] = f"kvsim-{options['model']}"
    if options.get("served_model_name"):
        values["served_model_name"] = options["served_model_name"]
    if options.get("kv_bytes_per_token") is None and options.get("num_blocks") is None:
        plan = capacity_plan(
            options["model"], options["gpu"], options.get("tp") or 1, options.get("kv_dtype") or "bf16"
        )
        if plan is not None:
            return SimConfig.from_capacity_plan(plan, **{k: v for k, v in values.items() if k != "num_blocks"})
        if options["model"].lower() != DEFAULT_MODEL and shipped_names():
            raise SimConfigError(
                f"model: {options['model']!r} is not a shipped model config (shipped: {', '.join(shipped_names())}); "
                "give --kv-bytes-per-token and --weight-bytes to simulate another model"
            )
    return SimConfig(**values)


def shipped_names() -> list[str]:
    """The shipped model configs the capacity model can size, or none when the simulator runs on its own."""
    try:
        from selection.domain.capacity.model_config import (  # optional: the simulator also runs alone
            shipped_models,
        )
    except ImportError:
        return []
    return list(shipped_models())


def describe_serving(config: SimConfig, options: dict[str, Any]) -> str:
    """What the simulator serves, how it was sized, and the model name a client must send."""
    sized = (
        f"sized from the shipped config {options['model']} (TP {options.get('tp') or 1}, KV "
        f"{options.get('kv_dtype') or 'bf16'}, vLLM rules on one {config.gpu})"
        if options.get("kv_bytes_per_token") is None and options.get("num_blocks") is None
        else "sized from --kv-bytes-per-token / --num-blocks"
    )
    tokens = config.total_blocks * config.effective_block_size
    return (
        f"{sized}: {config.kv_bytes_per_token:,} KV bytes per token, {config.total_blocks:,} blocks of "
        f"{config.effective_block_size} tokens = {tokens:,} tokens of KV cache\n"
        f"model name to send (the candidate's Model name): {config.served_model_name}"
    )


CAPACITY_GPU_NAMES = {"H100": "H100-80GB", "H200": "H200-141GB", "A100-80G": "A100-80GB", "L40S": "L40S-48GB"}


def capacity_plan(model: str, gpu: str, tp: int = 1, kv_dtype: str = "bf16") -> Any:
    """Size the block pool with kvselect's capacity model when `model` is a shipped config (vLLM rules).

    Returns None for names the capacity model does not know (the simulator's defaults apply)."""
    try:
        from selection.domain.capacity.base import CapacityError
        from selection.domain.capacity.model_config import shipped_models
        from selection.domain.capacity.plan import plan_for_model
    except ImportError:  # the simulator used on its own
        return None
    names = {name.lower(): name for name in shipped_models()}
    if model.lower() not in names:
        return None
    try:
        plan = plan_for_model(
            names[model.lower()],
            gpu=CAPACITY_GPU_NAMES.get(gpu, gpu),
            engine="vllm",
            block_size=16,
            gpu_memory_utilization=0.9,
            tp=tp,
            kv_dtype=kv_dtype,
        )
    except CapacityError as exc:
        raise SimConfigError(f"model: {exc}") from None
    if plan.num_blocks <= 0:
        raise SimConfigError(
            f"model: {names[model.lower()]} leaves no room for a KV cache on one {gpu} at TP {tp} "
            f"({plan.weight_bytes_per_rank / 2**30:.0f} GiB of weights per GPU): give a larger --tp"
        )
    return plan


def run(options: dict[str, Any], stdout=sys.stdout) -> int:
    try:
        config = config_from_options(options)
    except SimConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if options.get("trace"):
        from benchmarks.simulator.offline import TraceError, run_trace_file

        speedup, sample = options.get("speedup") or 1.0, options.get("sample")
        if not speedup > 0:
            print(f"error: --speedup: must be positive, got {speedup}", file=sys.stderr)
            return 2
        if sample is not None and sample < 1:
            print(f"error: --sample: must be a positive number of requests, got {sample}", file=sys.stderr)
            return 2
        try:
            result = run_trace_file(
                options["trace"], config, options.get("out"), None, options.get("trace_format"), speedup, sample
            )
        except (TraceError, OSError) as exc:
            print(f"error: --trace: {exc}", file=sys.stderr)
            return 2
        point = result.points[0]
        summary = {
            "evidence": result.evidence,
            "profile": config.profile,
            "speedup": speedup,
            "requests": result.metadata.get("trace_requests"),
            "requests_completed": point.requests_completed,
            "requests_failed": point.requests_failed,
            "duration_s": point.duration_s,
            "ttft_ms_p50": point.ttft_ms.p50,
            "tpot_ms_p50": point.tpot_ms.p50,
            **{
                k: point.extra[k]
                for k in ("peak_kv_cache_usage", "prefix_cache_hit_rate", "preemptions", "simulation_wall_s")
            },
            "out": options.get("out"),
        }
        print(json.dumps(summary, indent=2), file=stdout)
        return 0
    from benchmarks.simulator.server import serve_forever

    print(describe_serving(config, options), file=stdout, flush=True)
    try:
        asyncio.run(serve_forever(config, options["host"], options["port"]))
    except KeyboardInterrupt:
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.simulator", description=__doc__)
    add_arguments(parser)
    return run(vars(parser.parse_args(argv)))
