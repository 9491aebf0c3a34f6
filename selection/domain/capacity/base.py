"""The vocabulary every capacity module shares: units, engines, KV dtypes, GPUs, the error, and
how a figure or an estimate is written into a plan.
"""

from __future__ import annotations

from selection.domain.messages import Message

GiB = 1024**3

ENGINES = ("vllm", "sglang", "trtllm", "lmdeploy", "llamacpp")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")


# GPU memory as the driver reports it (what torch.cuda.mem_get_info / vLLM's "total_gpu_memory"
# see), not the marketing figure.
# Approximate: measure yours (vLLM logs it as "total_gpu_memory (...GiB)") and pass gpu_mem_gib.
GPU_MEMORY_GIB = {
    "A100-40GB": 39.39,  # vLLM issue 12330 log: total_gpu_memory (39.39GiB)
    "A100-80GB": 79.15,
    "H100-80GB": 79.22,  # vLLM PR 10511 / 12126 logs on H100-80G: total_gpu_memory 79.22GiB
    "H200-141GB": 139.81,  # 143,771 MiB board as torch sees it, approximately
    "L40S-48GB": 44.39,
}


DTYPE_BYTES = {
    "bfloat16": 2.0,
    "bf16": 2.0,
    "float16": 2.0,
    "fp16": 2.0,
    "half": 2.0,
    "float32": 4.0,
    "fp32": 4.0,
    "float": 4.0,
    "fp8": 1.0,
    "float8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}


class CapacityError(ValueError):
    """Invalid model config or capacity input; the message names the field and the problem."""


def json_number(x: float) -> float | int:
    """A figure as the plan's JSON stores it: an int when whole, else rounded to 4 decimals."""
    return int(x) if float(x).is_integer() else round(float(x), 4)


def labelled_estimate(name: str, value: float, source: str | Message, overridden: bool = False) -> dict:
    """An estimated input as the plan lists it, its source saying whether it was measured/given:
    `source` as English text (the API, the CLI), and, when written as a message, also as the stored
    message (`source_message`) that pages render in their language."""
    item = {
        "name": name,
        "value": json_number(value),
        "source": ("measured/override: " if overridden else "estimate: ") + str(source),
    }
    if isinstance(source, Message):
        item["source_message"] = source.to_dict()
    return item
