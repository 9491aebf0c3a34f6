import asyncio
import sys
import types

from benchmarks.harness.nvml import GpuSampler
from benchmarks.harness.tiny_gguf import write_tiny_llama


def test_gpu_sampler_records_unavailable_without_a_gpu(monkeypatch):
    fake = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def fail():
        raise NVMLError("Driver Not Loaded")

    fake.NVMLError, fake.nvmlInit = NVMLError, fail
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    async def go():
        async with GpuSampler(interval_s=0.05) as sampler:
            await asyncio.sleep(0.1)
        return sampler.recording

    recording = asyncio.run(go())
    assert not recording.available and recording.reason == "unavailable: Driver Not Loaded" and recording.series == {}


def test_gpu_sampler_samples_memory_and_utilisation(monkeypatch):
    fake = types.ModuleType("pynvml")
    fake.NVMLError = type("NVMLError", (Exception,), {})
    fake.nvmlInit = fake.nvmlShutdown = lambda: None
    fake.nvmlDeviceGetCount = lambda: 1
    fake.nvmlDeviceGetHandleByIndex = lambda i: i
    fake.nvmlDeviceGetName = lambda h: b"H200"
    fake.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=2**30 * 141, used=2**30)
    fake.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=55)
    monkeypatch.setitem(sys.modules, "pynvml", fake)

    async def go():
        async with GpuSampler(interval_s=0.05) as sampler:
            await asyncio.sleep(0.12)
        return sampler.recording

    recording = asyncio.run(go())
    assert recording.available and recording.gpus[0]["name"] == "H200"
    assert recording.peak("gpu0_memory_used_mib") == 1024 and recording.series["gpu0_util_pct"][0][1] == 55


def test_tiny_gguf_is_a_readable_llama(tmp_path):
    import gguf

    path = write_tiny_llama(tmp_path / "tiny.gguf", hidden=32, layers=1, heads=2, kv_heads=1, ffn=64, context=1024)
    reader = gguf.GGUFReader(str(path))
    arch = reader.fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == "llama"
    names = {t.name for t in reader.tensors}
    assert {"token_embd.weight", "output.weight", "blk.0.attn_k.weight"} <= names and len(names) == 12
    assert "tokenizer.chat_template" in reader.fields
