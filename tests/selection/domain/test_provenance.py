"""Is the evidence about the selection's model, version and hardware (selection.domain.provenance)?"""

from selection.domain import provenance as p

SIM_8B = {
    "served_models": ["kvsim-llama-3.1-8b"],
    "model_paths": ["llama-3.1-8b"],
    "max_model_len": 131072,
    "engine_version": "0.11.0",
    "version_source": "GET /version",
    "gpu": {"model": "H100", "count": 1, "memory_gib": 80.0, "driver": "simulated"},
}


def check(identity, **changes):
    values = dict(
        target_model="Llama-3.1-8B",
        candidate_model="kvsim-llama-3.1-8b",
        stated_version="0.11.0",
        gpu_model="H100",
        gpu_memory_gib=80.0,
        longest_request=33792,
    )
    values.update(changes)
    return [f["code"] for f in p.findings(identity, **values)]


def test_the_same_model_version_and_gpu_find_nothing():
    assert check(SIM_8B) == []
    assert p.model_matches(["meta-llama/Llama-3.1-8B-Instruct"], "Llama-3.1-8B")


def test_another_model_is_a_mismatch_naming_both():
    (finding,) = p.model_findings(SIM_8B, target_model="Llama-3.1-70B", candidate_model="kvsim-llama-3.1-8b")
    assert finding == {
        "code": p.MODEL_MISMATCH,
        "served": "kvsim-llama-3.1-8b, llama-3.1-8b",
        "target": "Llama-3.1-70B",
    }
    assert check(SIM_8B, candidate_model="Llama-3.1-70B", target_model="Llama-3.1-70B") == [
        p.MODEL_MISMATCH,
        p.MODEL_NOT_SERVED,
    ]


def test_a_reported_version_gpu_or_context_that_differs_is_flagged():
    assert check(SIM_8B, stated_version="0.10.2") == [p.VERSION_MISMATCH]
    assert check(SIM_8B, stated_version="v0.11.0") == []
    assert check(SIM_8B, gpu_model="A100-80GB") == [p.GPU_MISMATCH]
    assert check(SIM_8B, gpu_model="H100 NVL", gpu_memory_gib=94.0) == [p.GPU_MISMATCH]
    assert check({**SIM_8B, "gpu": {"model": "NVIDIA H100 80GB HBM3", "memory_gib": 79.6}}) == []
    assert check({**SIM_8B, "max_model_len": 8192}) == [p.CONTEXT_SHORT]


def test_an_endpoint_that_said_nothing_finds_nothing():
    assert check({}) == []


def test_a_version_not_in_the_catalog_assumes_the_newest_and_says_so():
    assert p.assumed_version("99.99.99-evil", ["0.11.0", "0.10.2"]) == "0.11.0"
    assert p.assumed_version("0.10.2", ["0.11.0", "0.10.2"]) is None


def test_validated_on_describes_the_engine_hosts_gpus():
    assert p.validated_on(SIM_8B["gpu"]) == "1× H100 (80 GiB, driver simulated)"
    assert p.validated_on(None) == ""


def test_validated_on_is_a_message_whose_driver_reads_in_words_when_simulated():
    from selection.domain.messages import render

    chinese = {"%(gpu)s (%(details)s)": "%(gpu)s（%(details)s）", "driver simulated": "驱动：模拟", ", ": "、"}
    message = p.validated_on_message(SIM_8B["gpu"])
    assert render(message, lambda msgid, context: chinese.get(msgid, msgid)) == "1× H100（80 GiB、驱动：模拟）"
    assert p.validated_on({"model": "H100", "driver": "550.54"}) == "H100 (driver 550.54)"
    assert p.validated_on({"model": "H100"}) == "H100"
