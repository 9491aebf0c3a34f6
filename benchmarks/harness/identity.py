"""What the engine behind an endpoint says it runs as and on: the model(s) it serves, its longest
context, its KV pool, its version and its GPUs.

Evidence is only about the selection's model, engine version and hardware when the engine host says
so; the load client's machine says nothing about it (its NVML sees the client's GPUs, if any). Each
field comes from the engine's own surfaces, the first that answers:

* served models: `GET /v1/models` (every OpenAI-compatible server): `data[].id` (the served name),
  `root` (vLLM: the weights the name stands for), `max_model_len` (vLLM, SGLang), `meta.n_ctx_train`
  (llama.cpp); SGLang `/get_server_info` `model_path`, llama.cpp `/props` `model_path`, TGI `/info`
  `model_id`;
* engine version: vLLM `GET /version`, SGLang `/get_server_info` `version`, TGI `/info` `version`,
  llama.cpp `/props` `build_info`, or a build-info metric (`*_build_info{version=...}`);
* KV pool: the metrics that state it (`metrics.kv_capacity`: vLLM's cache_config_info, SGLang's
  max_total_num_tokens, TensorRT-LLM's max blocks);
* GPUs: what the engine host exports, never the client's: the simulator's `kvsim_build_info`
  (gpu, gpu_memory_gib, gpu_count, driver, and `device`: the simulated GPU it is), a DCGM exporter's
  labels scraped from the same metrics URL (`modelName`, `DCGM_FI_DRIVER_VERSION`, one series per
  `gpu`; memory from `DCGM_FI_DEV_FB_*`),
  the worker's NVML when the worker launched the engine on its own machine (`gpu_from_nvml`), or an
  upload's metadata (`identity_from_upload`).

`identity_from` is pure (responses in, a dict out); `probe` fetches the surfaces with a short timeout
each, every connection through the outbound guard (`safety.urlopen`, with the allow-list the caller
gives). `simulated_device` asks one endpoint only which simulated GPU it is (the header every
simulator response carries): the hardware a run holds.
Pure Python: no Django.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping

from benchmarks.harness import safety
from benchmarks.harness.prometheus import EVIDENCE_HEADER, SIMULATED_LABEL, kv_capacity, parse_prometheus

DEVICE_HEADER = "X-Kvsim-Device"  # the simulated GPU a simulator is (benchmarks.simulator.server)

JSON_PATHS = ("/v1/models", "/version", "/get_server_info", "/props", "/info")
MAX_BYTES = 2_000_000
GIB = 2**30

# where a GPU description came from (the record says it)
GPU_FROM_ENGINE_METRICS, GPU_FROM_DCGM, GPU_FROM_NVML, GPU_FROM_UPLOAD = (
    "engine_metrics",
    "dcgm",
    "worker_nvml",
    "upload",
)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _positive_int(value: Any) -> int | None:
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 and not isinstance(value, bool) else None


def served_models(models: Any) -> tuple[list[str], list[str], int | None]:
    """(served ids, the model paths behind them, the longest context) from a `/v1/models` body."""
    data = models.get("data") if isinstance(models, Mapping) else None
    ids, roots, lengths = [], [], []
    for entry in data if isinstance(data, list) else []:
        if not isinstance(entry, Mapping):
            continue
        ids += [t for t in [_text(entry.get("id"))] if t]
        roots += [t for t in [_text(entry.get("root")), _text(entry.get("parent"))] if t]
        meta = entry.get("meta") if isinstance(entry.get("meta"), Mapping) else {}
        lengths += [n for n in (_positive_int(entry.get("max_model_len")), _positive_int(meta.get("n_ctx_train"))) if n]
    return ids, roots, max(lengths) if lengths else None


def _version(responses: Mapping[str, Any], samples: Mapping[str, list]) -> tuple[str | None, str]:
    for path, key in (("/version", "version"), ("/get_server_info", "version"), ("/info", "version")):
        body = responses.get(path)
        found = _text(body.get(key)) if isinstance(body, Mapping) else None
        if found:
            return found, f"GET {path}"
    props = responses.get("/props")
    if isinstance(props, Mapping) and _text(props.get("build_info")):
        return _text(props.get("build_info")), "GET /props build_info"
    for name, series in sorted(samples.items()):
        if name.endswith("build_info"):
            for labels, _value in series:
                if _text(labels.get("version")):
                    return labels["version"].strip(), f"metric {name}"
    return None, ""


def _model_paths(responses: Mapping[str, Any]) -> list[str]:
    paths = []
    for path, key in (("/get_server_info", "model_path"), ("/props", "model_path"), ("/info", "model_id")):
        body = responses.get(path)
        found = _text(body.get(key)) if isinstance(body, Mapping) else None
        if found:
            paths.append(found)
    return paths


def gpu_from_metrics(samples: Mapping[str, list]) -> dict[str, Any] | None:
    """The engine host's GPUs as its metrics state them: the simulator's build info, else DCGM's labels."""
    for labels, _value in samples.get("kvsim_build_info", []):
        memory = labels.get("gpu_memory_gib")
        return {
            "model": labels.get("gpu") or "",
            "count": _positive_int(labels.get("gpu_count")) or 1,
            "memory_gib": float(memory) if memory else None,
            "driver": labels.get("driver") or "",
            "device": labels.get("device") or "",
            "source": GPU_FROM_ENGINE_METRICS,
        }
    devices: dict[str, dict[str, Any]] = {}
    for name, series in samples.items():
        if not name.startswith("DCGM_FI_"):
            continue
        for labels, value in series:
            device = devices.setdefault(labels.get("gpu") or labels.get("UUID") or "0", {"mib": 0.0})
            device.setdefault("model", labels.get("modelName") or "")
            device.setdefault("driver", labels.get("DCGM_FI_DRIVER_VERSION") or "")
            if name in ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED"):
                device["mib"] += value
    if not devices:
        return None
    first = next(iter(devices.values()))
    return {
        "model": first["model"],
        "count": len(devices),
        "memory_gib": round(first["mib"] / 1024, 1) if first["mib"] else None,
        "driver": first["driver"],
        "source": GPU_FROM_DCGM,
    }


def gpu_from_nvml(gpus: list[Mapping[str, Any]], driver: str = "") -> dict[str, Any] | None:
    """The worker's NVML reading (`nvml.GpuRecording.gpus`) as the engine host's GPUs: only when the
    worker launched the engine on its own machine."""
    if not gpus:
        return None
    first = gpus[0]
    memory = first.get("memory_total_mib")
    return {
        "model": str(first.get("name") or ""),
        "count": len(gpus),
        "memory_gib": round(float(memory) / 1024, 1) if memory else None,
        "driver": driver or str(first.get("driver") or ""),
        "source": GPU_FROM_NVML,
    }


def identity_from(
    responses: Mapping[str, Any], metrics_text: str | None = None, *, simulated: bool = False
) -> dict[str, Any]:
    """What the engine says it is, from its JSON surfaces (path -> parsed body, absent when it did not
    answer) and its metrics text."""
    try:
        samples = parse_prometheus(metrics_text) if metrics_text else {}
    except ValueError:
        samples = {}
    ids, roots, max_len = served_models(responses.get("/v1/models"))
    version, version_source = _version(responses, samples)
    pool = kv_capacity(samples)
    return {
        "reachable": bool(responses) or bool(samples),
        "served_models": ids,
        "model_paths": list(dict.fromkeys(roots + _model_paths(responses))),
        "max_model_len": max_len,
        "kv_pool_tokens": pool["tokens"] if pool else None,
        "kv_pool_source": pool["source"] if pool else "",
        "engine_version": version,
        "version_source": version_source,
        "gpu": gpu_from_metrics(samples),
        "simulated": simulated
        or any(labels.get("evidence") == SIMULATED_LABEL for labels, _ in samples.get("kvsim_info", [])),
    }


Fetch = Callable[[str, Mapping[str, str], float], tuple[int, Mapping[str, str], bytes]]


def guarded_fetch(allowed_hosts: safety.Allowed) -> Fetch:
    """A fetch whose every connection passes the outbound guard (`safety.urlopen`): refused hosts and
    addresses raise `safety.TargetRefused` before anything is sent."""

    def fetch(url: str, headers: Mapping[str, str], timeout_s: float) -> tuple[int, Mapping[str, str], bytes]:
        request = urllib.request.Request(url, headers=dict(headers))
        with safety.urlopen(request, allowed_hosts, timeout=timeout_s) as response:
            return response.status, dict(response.headers), response.read(MAX_BYTES)

    return fetch


def _fetch_for(fetch: Fetch | None, allowed_hosts: safety.Allowed) -> Fetch:
    if fetch is not None:
        return fetch
    if allowed_hosts is None:
        raise ValueError("identity probe: no outbound allow-list given (pass allowed_hosts, or a fetch)")
    return guarded_fetch(allowed_hosts)


def probe(
    endpoint_url: str,
    metrics_url: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 2.0,
    fetch: Fetch | None = None,
    allowed_hosts: safety.Allowed = None,
) -> dict[str, Any]:
    """Ask the engine what it is (see `identity_from`); a surface that does not answer is left out,
    and an endpoint that refuses the connection is `reachable: False` after one try. Every request
    goes through the outbound guard with `allowed_hosts` (a refused target answers nothing)."""
    fetch = _fetch_for(fetch, allowed_hosts)
    base = endpoint_url.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base  # the client's rule: the API root
    responses: dict[str, Any] = {}
    simulated = False
    for path in JSON_PATHS:
        try:
            status, response_headers, body = fetch(base + path, headers or {}, timeout_s)
        except urllib.error.HTTPError:
            continue
        except (urllib.error.URLError, OSError, ValueError):
            if path == JSON_PATHS[0]:
                break  # nothing listens there: do not wait on every other path
            continue
        simulated = simulated or str(response_headers.get(EVIDENCE_HEADER, "")).upper() == SIMULATED_LABEL
        try:
            responses[path] = json.loads(body.decode("utf-8", "replace")) if status < 400 else None
        except ValueError:
            continue
    metrics_text = None
    if responses:
        try:
            _status, _headers, body = fetch(metrics_url or base + "/metrics", headers or {}, timeout_s)
            metrics_text = body.decode("utf-8", "replace")
        except (urllib.error.URLError, OSError, ValueError):
            metrics_text = None
    return identity_from({k: v for k, v in responses.items() if v is not None}, metrics_text, simulated=simulated)


def device_from_headers(headers: Mapping[str, str]) -> str | None:
    """The simulated GPU a response's headers name: only together with the simulator's SIMULATED mark
    (a run on it is SIMULATED evidence, never a measurement of real hardware)."""
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    if lowered.get(EVIDENCE_HEADER.lower(), "").upper() != SIMULATED_LABEL:
        return None
    return _text(lowered.get(DEVICE_HEADER.lower()))


def simulated_device(
    endpoint_url: str,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 1.0,
    fetch: Fetch | None = None,
    allowed_hosts: safety.Allowed = None,
) -> str | None:
    """Which simulated GPU the kvselect simulator at `endpoint_url` is (`GET /v1/models`'s
    `X-Kvsim-Device`); None for a real engine, an endpoint that does not answer, or an error: the
    caller then keys the run by the engine's host, as for any real engine. Through the outbound guard
    with `allowed_hosts`."""
    fetch = _fetch_for(fetch, allowed_hosts)
    base = endpoint_url.rstrip("/")
    base = base[: -len("/v1")] if base.endswith("/v1") else base
    try:
        _status, response_headers, _body = fetch(base + "/v1/models", headers or {}, timeout_s)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    return device_from_headers(response_headers)


def identity_from_upload(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What an uploaded result's metadata says the engine ran as and on (the tool recorded it from the
    engine host: aiperf's GPU telemetry, vLLM bench's run metadata, SGLang bench's server_info)."""
    gpu = None
    hardware = metadata.get("hardware")
    if isinstance(hardware, Mapping) and hardware and all(isinstance(v, Mapping) for v in hardware.values()):
        first = next(iter(hardware.values()))
        gpu = {
            "model": str(first.get("gpu_model") or first.get("gpu_name") or ""),
            "count": len(hardware),
            "memory_gib": None,
            "driver": "",
            "source": GPU_FROM_UPLOAD,
        }
    elif _text(metadata.get("gpu")) or _text(hardware):
        gpu = {
            "model": _text(metadata.get("gpu")) or _text(hardware) or "",
            "count": None,
            "memory_gib": None,
            "driver": "",
            "source": GPU_FROM_UPLOAD,
        }
    model = _text(metadata.get("model"))
    return {
        "reachable": False,
        "served_models": [model] if model else [],
        "model_paths": [],
        "max_model_len": None,
        "kv_pool_tokens": None,
        "kv_pool_source": "",
        "engine_version": _text(metadata.get("engine_version")),
        "version_source": "upload metadata" if _text(metadata.get("engine_version")) else "",
        "gpu": gpu,
        "simulated": False,
    }
