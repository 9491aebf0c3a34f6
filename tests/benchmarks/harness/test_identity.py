"""What an engine says it runs as and on (benchmarks.harness.identity): each engine's surfaces, the
engine host's GPUs from its metrics (never the load client's), and an endpoint that does not answer."""

import json
import urllib.error

import pytest

from benchmarks.harness import identity

VLLM_METRICS = (
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",num_gpu_blocks="27809"} 1.0\n'
    "# TYPE DCGM_FI_DEV_FB_FREE gauge\n"
    'DCGM_FI_DEV_FB_FREE{gpu="0",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="550.54.15"} 4000\n'
    'DCGM_FI_DEV_FB_FREE{gpu="1",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="550.54.15"} 4000\n'
    "# TYPE DCGM_FI_DEV_FB_USED gauge\n"
    'DCGM_FI_DEV_FB_USED{gpu="0",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="550.54.15"} 77559\n'
    'DCGM_FI_DEV_FB_USED{gpu="1",modelName="NVIDIA H100 80GB HBM3",DCGM_FI_DRIVER_VERSION="550.54.15"} 77559\n'
)


def test_vllm_models_version_pool_and_dcgm_gpus():
    models = {"data": [{"id": "support", "root": "meta-llama/Llama-3.1-70B-Instruct", "max_model_len": 32768}]}
    found = identity.identity_from({"/v1/models": models, "/version": {"version": "0.11.0"}}, VLLM_METRICS)
    assert found["served_models"] == ["support"]
    assert found["model_paths"] == ["meta-llama/Llama-3.1-70B-Instruct"]
    assert found["max_model_len"] == 32768
    assert found["kv_pool_tokens"] == 27809 * 16
    assert (found["engine_version"], found["version_source"]) == ("0.11.0", "GET /version")
    assert found["gpu"] == {
        "model": "NVIDIA H100 80GB HBM3",
        "count": 2,
        "memory_gib": 79.6,
        "driver": "550.54.15",
        "source": identity.GPU_FROM_DCGM,
    }


def test_sglang_llamacpp_and_build_info_versions():
    sglang = identity.identity_from({"/get_server_info": {"version": "0.5.5", "model_path": "Qwen/Qwen2.5-7B"}})
    assert (sglang["engine_version"], sglang["model_paths"]) == ("0.5.5", ["Qwen/Qwen2.5-7B"])
    props = {"build_info": "b6123-00dc805", "model_path": "/models/llama-3.1-8b.gguf"}
    llama = identity.identity_from(
        {"/props": props, "/v1/models": {"data": [{"id": "m", "meta": {"n_ctx_train": 131072}}]}}
    )
    assert llama["engine_version"] == "b6123-00dc805" and llama["max_model_len"] == 131072
    built = identity.identity_from({}, '# TYPE x_build_info gauge\nx_build_info{version="2.1"} 1\n')
    assert (built["engine_version"], built["version_source"]) == ("2.1", "metric x_build_info")
    assert built["gpu"] is None  # nothing on the engine host states its GPUs


def test_an_endpoint_that_refuses_the_connection_is_unreachable_after_one_try():
    calls = []

    def refused(url, headers, timeout):
        calls.append(url)
        raise urllib.error.URLError("connection refused")

    found = identity.probe("http://127.0.0.1:9/v1", fetch=refused)
    assert found["reachable"] is False and calls == ["http://127.0.0.1:9/v1/models"]


def test_probe_reads_each_surface_and_marks_the_simulator():
    bodies = {
        "/v1/models": {"data": [{"id": "kvsim-llama-3.1-8b", "root": "llama-3.1-8b", "max_model_len": 131072}]},
        "/version": {"version": "0.11.0", "simulator": "kvsim"},
    }

    def fetch(url, headers, timeout):
        path = url.removeprefix("http://engine:8000")
        if path == "/metrics":
            labels = 'version="0.11.0",gpu="H100",gpu_memory_gib="80",gpu_count="1",driver="simulated"'
            text = f"# TYPE kvsim_build_info gauge\nkvsim_build_info{{{labels}}} 1\n"
            return 200, {}, text.encode()
        if path not in bodies:
            raise urllib.error.HTTPError(url, 404, "not found", {}, None)
        return 200, {"X-Kvsim-Evidence": "SIMULATED"}, json.dumps(bodies[path]).encode()

    found = identity.probe("http://engine:8000", fetch=fetch)
    assert found["simulated"] and found["engine_version"] == "0.11.0"
    assert found["gpu"]["model"] == "H100" and found["gpu"]["source"] == identity.GPU_FROM_ENGINE_METRICS


@pytest.mark.parametrize(
    ("metadata", "model", "count"),
    [
        (
            {"hardware": {"0": {"gpu_name": "NVIDIA H100 80GB HBM3"}, "1": {"gpu_name": "NVIDIA H100 80GB HBM3"}}},
            "NVIDIA H100 80GB HBM3",
            2,
        ),
        ({"gpu": "A100-80GB", "engine_version": "0.10.1"}, "A100-80GB", None),
    ],
)
def test_an_uploads_metadata_names_the_engine_hosts_gpus(metadata, model, count):
    found = identity.identity_from_upload(metadata)
    assert found["gpu"]["model"] == model and found["gpu"]["count"] == count
    assert found["gpu"]["source"] == identity.GPU_FROM_UPLOAD


def test_the_workers_nvml_describes_the_engine_host_it_launched():
    gpu = identity.gpu_from_nvml([{"name": "NVIDIA H200", "memory_total_mib": 143771.0}], "560.35.03")
    assert gpu == {
        "model": "NVIDIA H200",
        "count": 1,
        "memory_gib": 140.4,
        "driver": "560.35.03",
        "source": "worker_nvml",
    }
    assert identity.gpu_from_nvml([]) is None


def test_the_run_page_says_what_the_engine_ran_as_and_on():
    from benchmarks.presentation import GPU_SOURCES, engine_host

    host = {
        "identity": {
            "served_models": ["kvsim-llama-3.1-8b"],
            "model_paths": ["llama-3.1-8b"],
            "engine_version": "0.11.0",
            "version_source": "GET /version",
            "gpu": {"model": "H100", "count": 1, "memory_gib": 80.0, "driver": "simulated", "source": "engine_metrics"},
        }
    }
    assert engine_host({"engine_host": host}) == {
        "models": ["kvsim-llama-3.1-8b", "llama-3.1-8b"],
        "version": "0.11.0",
        "version_request": "GET /version",
        "version_metric": "",
        "version_from_upload": False,
        "gpu": {
            "count": 1,
            "model": "H100",
            "memory_gib": "80",
            "driver": "simulated",
            "simulated_driver": True,
            "source": GPU_SOURCES["engine_metrics"],
        },
    }
    host["identity"]["version_source"] = "metric vllm:build_info"
    assert engine_host({"engine_host": host})["version_metric"] == "vllm:build_info"
    assert engine_host({"engine_host": {"identity": {}}})["gpu"] is None  # "GPUs not reported by the engine host"
    assert engine_host({"gpu": {"available": True}}) is None  # the load client's NVML is not the engine host's


def test_a_simulator_names_its_simulated_gpu_and_nothing_else_does():
    def answering(headers):
        def fetch(url, _headers, _timeout):
            assert url == "http://127.0.0.1:8101/v1/models"
            return 200, headers, b'{"data": []}'

        return fetch

    simulated = {"X-Kvsim-Evidence": "SIMULATED", "X-Kvsim-Device": "kvsim-1"}
    assert identity.simulated_device("http://127.0.0.1:8101/v1", fetch=answering(simulated)) == "kvsim-1"
    # a device name without the SIMULATED mark is not trusted: the run keeps its host's key
    for headers in ({"X-Kvsim-Device": "kvsim-1"}, {"X-Kvsim-Evidence": "SIMULATED"}):
        assert identity.simulated_device("http://127.0.0.1:8101", fetch=answering(headers)) is None

    def refused(url, headers, timeout):
        raise urllib.error.URLError("connection refused")

    assert identity.simulated_device("http://127.0.0.1:8101", fetch=refused) is None
    labels = 'gpu="H100",gpu_count="1",driver="simulated",device="kvsim-1"'
    found = identity.identity_from({}, f"# TYPE kvsim_build_info gauge\nkvsim_build_info{{{labels}}} 1\n")
    assert found["gpu"]["device"] == "kvsim-1"
