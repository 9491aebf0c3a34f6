"""`manage.py kvcapacity`: a KV-cache capacity plan for one model, engine and GPU (thin wrapper
over selection.domain.capacity)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from selection.domain.capacity.base import ENGINES, GPU_MEMORY_GIB, KV_DTYPES, CapacityError, GiB
from selection.domain.capacity.model_config import shipped_models
from selection.domain.capacity.plan import CapacityPlan, plan_for_model
from selection.domain.messages import plain

_OPTION_OF_FIELD = {
    "model": "--model",
    "config": "--model",
    "kv_dtype": "--kv-dtype",
    "tp": "--tp",
    "pp": "--pp",
    "engine": "--engine",
    "gpu_mem_gib": "--gpu-mem-gib",
    "gpu_memory": "--gpu-mem-gib",
    "gpu": "--gpu",
    "contexts": "--context",
    "gpu_memory_utilization": "--mem-fraction",
    "mem_fraction_static": "--mem-fraction",
    "free_gpu_memory_fraction": "--mem-fraction",
    "kv_cache_memory_bytes": "--kv-cache-memory-gib",
    "max_tokens": "--max-tokens",
    "ctx_size": "--ctx-size",
    "block_size": "--block-size",
    "weight_dtype": "--weight-dtype",
    "max_model_len": "--max-model-len",
    "activation_peak_bytes": "--activation-gib",
    "non_torch_bytes": "--non-torch-gib",
    "cuda_graph_bytes": "--cuda-graph-gib",
}


def _option_for(message: str) -> str:
    head = message.split(":", 1)[0].strip()
    field = head.split(".", 1)[0]
    if field == "config":
        return "--model"
    return _OPTION_OF_FIELD.get(field, "")


def _gib(b: float) -> str:
    return f"{b / GiB:,.2f} GiB"


class Command(BaseCommand):
    requires_system_checks: list = []  # pure calculation: no database, no checks noise on stdout/stderr
    help = (
        "KV-cache capacity plan: KV bytes per token, blocks, token capacity and concurrent "
        "sequences per context length for a model config under an engine's memory rules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--model",
            required=True,
            help=f"shipped model name ({', '.join(shipped_models())}) or path to a config.json",
        )
        parser.add_argument("--kv-dtype", default="bf16", help="bf16|fp16|fp8|int8|int4 (default bf16)")
        parser.add_argument("--tp", default="1", help="tensor-parallel size (default 1)")
        parser.add_argument("--pp", default="1", help="pipeline-parallel size (default 1)")
        parser.add_argument("--engine", default="vllm", help="vllm|sglang|trtllm|llamacpp (default vllm)")
        parser.add_argument("--gpu", default=None, help=f"known GPU ({', '.join(GPU_MEMORY_GIB)}); default H100-80GB")
        parser.add_argument("--gpu-mem-gib", default=None, help="GPU memory in GiB (overrides --gpu)")
        parser.add_argument(
            "--context",
            nargs="+",
            default=None,
            help="context lengths of interest in tokens (default 4096 32768 131072)",
        )
        parser.add_argument(
            "--mem-fraction",
            default=None,
            help="vLLM gpu_memory_utilization / SGLang mem_fraction_static / TensorRT-LLM free_gpu_memory_fraction",
        )
        parser.add_argument("--kv-cache-memory-gib", default=None, help="vLLM kv_cache_memory_bytes, in GiB")
        parser.add_argument("--max-tokens", default=None, help="TensorRT-LLM KvCacheConfig.max_tokens")
        parser.add_argument("--ctx-size", default=None, help="llama.cpp --ctx-size")
        parser.add_argument("--block-size", default=None, help="override the engine's block/page size")
        parser.add_argument("--weight-dtype", default=None, help="override weight dtype (bf16|fp16|fp8|int8|int4)")
        parser.add_argument("--max-model-len", default=None, help="engine max_model_len (default: model's)")
        parser.add_argument("--activation-gib", default=None, help="measured activation peak (GiB)")
        parser.add_argument("--non-torch-gib", default=None, help="measured non-torch memory (GiB)")
        parser.add_argument("--cuda-graph-gib", default=None, help="measured CUDA-graph memory (GiB)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    @staticmethod
    def _int(value: str | None, option: str, minimum: int = 1) -> int | None:
        if value is None:
            return None
        try:
            number = int(str(value).replace("_", "").replace(",", ""))
        except ValueError:
            raise CommandError(f"{option}: must be an integer, got {value!r}") from None
        if number < minimum:
            raise CommandError(f"{option}: must be >= {minimum}, got {number}")
        return number

    @staticmethod
    def _float(value: str | None, option: str) -> float | None:
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise CommandError(f"{option}: must be a number, got {value!r}") from None
        if not number > 0 and option != "--activation-gib":
            raise CommandError(f"{option}: must be positive, got {value!r}")
        return number

    def handle(self, *args, **o) -> None:
        engine = o["engine"].lower()
        if engine not in ENGINES:
            raise CommandError(f"--engine: must be one of {', '.join(ENGINES)}, got {o['engine']!r}")
        kv_dtype = o["kv_dtype"].lower()
        if kv_dtype not in KV_DTYPES:
            raise CommandError(f"--kv-dtype: must be one of {', '.join(KV_DTYPES)}, got {o['kv_dtype']!r}")
        contexts = tuple(self._int(c, "--context") for c in o["context"]) if o["context"] else None
        kwargs = {
            "kv_dtype": kv_dtype,
            "engine": engine,
            "tp": self._int(o["tp"], "--tp"),
            "pp": self._int(o["pp"], "--pp"),
            "gpu": o["gpu"],
            "gpu_mem_gib": self._float(o["gpu_mem_gib"], "--gpu-mem-gib"),
            "max_tokens": self._int(o["max_tokens"], "--max-tokens"),
            "ctx_size": self._int(o["ctx_size"], "--ctx-size"),
            "block_size": self._int(o["block_size"], "--block-size"),
            "max_model_len": self._int(o["max_model_len"], "--max-model-len"),
            "weight_dtype": o["weight_dtype"],
        }
        if contexts:
            kwargs["contexts"] = contexts
        frac = self._float(o["mem_fraction"], "--mem-fraction")
        if frac is not None:
            kwargs[
                {
                    "vllm": "gpu_memory_utilization",
                    "sglang": "mem_fraction_static",
                    "trtllm": "free_gpu_memory_fraction",
                }.get(engine, "gpu_memory_utilization")
            ] = frac
        for opt, field in (
            ("kv_cache_memory_gib", "kv_cache_memory_bytes"),
            ("activation_gib", "activation_peak_bytes"),
            ("non_torch_gib", "non_torch_bytes"),
            ("cuda_graph_gib", "cuda_graph_bytes"),
        ):
            v = self._float(o[opt], "--" + opt.replace("_", "-"))
            if v is not None:
                kwargs[field] = int(v * GiB)
        try:
            plan = plan_for_model(o["model"], **kwargs)
        except CapacityError as exc:
            option = _option_for(str(exc))
            raise CommandError(f"{option + ' -> ' if option else ''}{exc}") from exc
        data = plain(plan.to_dict())  # notes as English text
        if o["json"]:
            self.stdout.write(json.dumps(data, sort_keys=False))
            return
        self.stdout.write(self._table(plan, data))

    def _table(self, plan: CapacityPlan, d: dict) -> str:
        i = plan.inputs
        rows = [
            (
                "model",
                f"{d['model']} ({d['model_type']}, {d['attention']} attention, {d['params_total'] / 1e9:.2f}B params)",
            ),
            (
                "layers",
                ", ".join(f"{n} {k}" for k, n in d["layer_kinds"].items())
                + (f"; window {d['sliding_window']}" if d["sliding_window"] else ""),
            ),
            (
                "engine / GPU",
                f"{i.engine}, {d['gpu_name']} ({d['gpu_memory_gib']} GiB), TP={i.tp} PP={i.pp}, KV {i.kv_dtype}",
            ),
            (
                "KV bytes/token",
                f"{d['kv_bytes_per_token']:,} per GPU, {d['kv_bytes_per_token_total']:,} all GPUs"
                f" ({d['kv_heads_per_rank']} KV head(s)/rank"
                f"{', replicated across TP' if d['kv_replicated_across_tp'] else ''})",
            ),
            ("weights", f"{_gib(plan.weight_bytes_per_rank)} per GPU ({_gib(plan.weight_bytes_total)} total)"),
            ("KV pool", f"{_gib(plan.kv_memory_bytes)} per GPU"),
            ("blocks", f"{d['num_blocks']:,} x {d['block_size']} tokens ({d['bytes_per_block']:,} B/block)"),
            ("token capacity", f"{d['token_capacity']:,}"),
        ]
        if plan.state_bytes_per_sequence:
            rows.append(("SSM state/seq", _gib(plan.state_bytes_per_sequence)))
        width = max(len(r[0]) for r in rows)
        out = [f"{k:<{width}}  {v}" for k, v in rows]
        out.append("")
        out.append(f"{'context':>9}  {'bytes/seq':>12}  {'max conc.':>9}  {'seqs @80%':>9}  {'seqs @70%':>9}")
        for c in sorted(plan.max_concurrency):
            out.append(
                f"{c:>9,}  {_gib(plan.bytes_per_sequence[c]):>12}  {plan.max_concurrency[c]:>8.2f}x"
                f"  {d['headroom']['sequences_at_80pct'][str(c)]:>9,}"
                f"  {d['headroom']['sequences_at_70pct'][str(c)]:>9,}"
            )
        if plan.estimates:
            out.append("")
            out.append("estimates (override with measured values):")
            for e in plan.estimates:
                value = e["value"]
                shown = _gib(value) if e["name"].endswith("_bytes") else value
                out.append(f"  {e['name']} = {shown}  [{e['source']}]")
        if plan.notes:
            out.append("")
            out.append("notes:")
            out.extend(f"  - {n}" for n in plan.notes)
        return "\n".join(out) + "\n"
