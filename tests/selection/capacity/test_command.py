"""`manage.py kvcapacity`: JSON contract, readable table, option errors named."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError


def run(*args):
    out = StringIO()
    call_command("kvcapacity", *args, stdout=out)
    return out.getvalue()


def test_json_has_the_contract_keys():
    data = json.loads(run("--model", "Llama-3.1-70B", "--tp", "4", "--gpu", "H100-80GB", "--json"))
    assert data["kv_bytes_per_token"] == 81920
    assert data["kv_bytes_per_token_total"] == 327680
    assert data["block_size"] == 16
    assert data["num_blocks"] > 0 and data["token_capacity"] == data["num_blocks"] * 16
    assert set(data["max_concurrency"]) == {"4096", "32768", "131072"}


def test_json_deepseek_mla_fp8_kv_and_contexts():
    data = json.loads(
        run(
            "--model",
            "DeepSeek-V3",
            "--tp",
            "8",
            "--gpu",
            "H200-141GB",
            "--kv-dtype",
            "fp8",
            "--context",
            "8192",
            "65536",
            "--json",
        )
    )
    assert data["kv_bytes_per_token"] == 61 * 576  # fp8, replicated, no factor 2
    assert data["kv_bytes_per_token_total"] == 61 * 576 * 8
    assert set(data["max_concurrency"]) == {"8192", "65536"}


def test_engine_specific_fraction_and_gpu_memory():
    data = json.loads(
        run("--model", "Llama-3.1-8B", "--engine", "sglang", "--gpu-mem-gib", "80", "--mem-fraction", "0.8", "--json")
    )
    assert data["block_size"] == 1 and data["engine"] == "sglang"
    assert data["kv_memory_bytes"] == pytest.approx(80 * 0.8 * 2**30 - data["weight_bytes_per_rank"], rel=1e-6)


def test_human_output_is_a_table_with_estimates():
    text = run("--model", "Gemma-3-27B", "--tp", "2")
    assert "KV bytes/token" in text and "token capacity" in text
    assert "seqs @80%" in text and "estimate:" in text
    assert "52 sliding" in text


@pytest.mark.parametrize(
    "args, option",
    [
        (["--model", "nope"], "--model"),
        (["--model", "Llama-3.1-70B", "--tp", "3"], "--tp"),
        (["--model", "Llama-3.1-70B", "--tp", "x"], "--tp"),
        (["--model", "Llama-3.1-8B", "--kv-dtype", "int8"], "--kv-dtype"),
        (["--model", "Llama-3.1-8B", "--kv-dtype", "fp4"], "--kv-dtype"),
        (["--model", "Llama-3.1-8B", "--engine", "tgi"], "--engine"),
        (["--model", "Llama-3.1-8B", "--gpu-mem-gib", "-1"], "--gpu-mem-gib"),
        (["--model", "Llama-3.1-8B", "--context", "0"], "--context"),
        (["--model", "Llama-3.1-8B", "--mem-fraction", "1.5"], "--mem-fraction"),
        (["--model", "Llama-3.1-8B", "--pp", "99"], "--pp"),
    ],
)
def test_bad_input_names_the_option(args, option):
    with pytest.raises(CommandError) as exc:
        run(*args)
    assert str(exc.value).startswith(option)


def test_uploaded_config_path_is_validated(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "num_hidden_layers": 4,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "num_key_value_heads": -1,
                "vocab_size": 100,
            }
        )
    )
    with pytest.raises(CommandError, match="--model -> config.num_key_value_heads: must be a positive integer"):
        run("--model", str(path))
