"""GPU sampler via NVML (nvidia-ml-py): memory used and utilisation per GPU while a load runs.

Why: KV capacity is GPU memory; a run's evidence should show how full the GPUs actually were.
Without a GPU or driver the recording says "unavailable" (and why) instead of failing the run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class GpuRecording:
    available: bool = False
    reason: str | None = None  # why unavailable
    gpus: list[dict[str, Any]] = field(default_factory=list)  # index, name, memory_total_mib
    series: dict[str, list[list[float]]] = field(default_factory=dict)  # gpu0_memory_used_mib, gpu0_util_pct

    def to_dict(self) -> dict[str, Any]:
        return {"available": self.available, "reason": self.reason, "gpus": self.gpus}

    def peak(self, name: str) -> float | None:
        values = self.series.get(name)
        return max(v for _, v in values) if values else None


class GpuSampler:
    """Samples every GPU each `interval_s`; times are seconds since `time_zero` (perf_counter)."""

    def __init__(self, interval_s: float = 1.0, time_zero: float | None = None) -> None:
        self.interval_s = interval_s
        self.time_zero = time.perf_counter() if time_zero is None else time_zero
        self.recording = GpuRecording()
        self._handles: list[Any] = []
        self._task: asyncio.Task | None = None
        self._nvml: Any = None

    def _init(self) -> bool:
        try:
            import pynvml
        except ImportError:
            self.recording.reason = "unavailable: nvidia-ml-py is not installed"
            return False
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self.recording.reason = f"unavailable: {exc}"
            return False
        if count == 0:
            self.recording.reason = "unavailable: no GPU found"
            return False
        self._nvml = pynvml
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            self._handles.append(handle)
            self.recording.gpus.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_mib": memory.total / 2**20,
                }
            )
        self.recording.available = True
        return True

    def sample_once(self) -> None:
        if not self._handles:
            return
        now = time.perf_counter() - self.time_zero
        pynvml = self._nvml
        for index, handle in enumerate(self._handles):
            try:
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                util = pynvml.nvmlDeviceGetUtilizationRates(handle)
            except pynvml.NVMLError:
                continue
            self.recording.series.setdefault(f"gpu{index}_memory_used_mib", []).append([now, memory.used / 2**20])
            self.recording.series.setdefault(f"gpu{index}_util_pct", []).append([now, float(util.gpu)])

    async def __aenter__(self) -> "GpuSampler":
        if self._init():
            self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self.sample_once()
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass

    async def _loop(self) -> None:
        while True:
            self.sample_once()  # NVML calls take microseconds: fine on the event loop
            await asyncio.sleep(self.interval_s)


def host_gpus() -> tuple[list[dict[str, Any]], str, str | None]:
    """(GPUs, driver version, why unavailable) of the machine this runs on, read once: the engine
    host's GPUs when this machine launched the engine (never a load client's view of a remote engine)."""
    try:
        import pynvml
    except ImportError:
        return [], "", "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return [], "", str(exc)
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20,
                }
            )
    except pynvml.NVMLError as exc:
        return [], "", str(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    driver = driver.decode() if isinstance(driver, bytes) else str(driver)
    return gpus, driver, None if gpus else "no GPU found"
