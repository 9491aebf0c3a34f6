"""The long-context and switch tests' verdict details are messages: the English the API and the CLI
show reads as before, and a Chinese page renders the same figures in Chinese."""

from benchmarks.harness.workloads import long_context, model_switch
from benchmarks.verdicts import detail_of
from selection.i18n import message_text


def chinese(judged: dict) -> str:
    text = message_text(detail_of(judged), "zh-hans")
    assert any("\u4e00" <= c <= "\u9fff" for c in text), text
    return text


def test_the_ladder_verdicts_read_in_both_languages():
    served = long_context._largest_rung_verdict(16384, [4096, 16384], 16384, None, None, [])
    assert served["detail"] == (
        "the required 16384 tokens were sent and served (largest rung 16384, 0 request(s) at or above the requirement)"
    )
    assert "要求的 16384 个 token 已发送并得到服务" in chinese(served)
    failed = long_context._largest_rung_verdict(16384, [4096, 16384], 4096, 16384, "HTTP 400: too long", [])
    assert failed["detail"] == (
        "rung 16384 failed with the engine's error: HTTP 400: too long; largest successful input 4096 tokens, "
        "required 16384"
    )
    assert "HTTP 400: too long" in chinese(failed)  # the engine's own words, quoted
    short = long_context._largest_rung_verdict(16384, [4096], 4096, None, None, [])
    assert short["detail"].startswith("the required 16384 tokens were never sent (rungs [4096], largest served 4096)")
    assert chinese(short).startswith("从未发送要求的 16384 个 token")


def test_the_switch_verdicts_read_in_both_languages():
    params = {"ttft_p95_ms": 500, "max_recovery_s": 30}
    recovered = model_switch._recovery_verdict("budget_recovered_after_switch", [], 2.5, params, 5, True, True, 40.0)
    assert recovered["detail"] == ("the budget (TTFT <= 500 ms) held again 2.50 s after the switch (limit 30 s, n=0)")
    assert chinese(recovered) == "切换之后 2.50 秒预算（TTFT <= 500 ms）重新得到满足（限度 30 秒，n=0）"
    never = model_switch._recovery_verdict("budget_recovered_after_rollback", [], None, {}, 5, False, False, 0.0)
    assert never["detail"] == "the rollback never happened (cancelled first)"
    assert chinese(never) == "回滚从未发生（先被取消）"
