import pytest

from benchmarks.harness.client import OpenAIClient
from benchmarks.harness.prompts import PromptFactory, calibrate
from benchmarks.simulator.mock_server import MockConfig, mock_tokenize


def calibrated(server, api="completions"):
    async def go():
        async with OpenAIClient(server.url, "m") as client:
            return await calibrate(client, api=api)

    return go()


def test_exact_lengths_through_tokenize(with_mock):
    factory = with_mock(None, calibrated)
    assert factory.exact and factory.source == "tokenize"
    assert all(check["engine_tokens"] == check["requested"] for check in factory.checks)
    for n in (1, 17, 4096):
        assert len(mock_tokenize(factory.text(n, seed=n))) == n
    assert factory.text(50, seed=1) != factory.text(50, seed=2)


def test_shared_prefix_is_identical_across_seeds():
    factory = PromptFactory(words=["a", "b", "c", "d"])
    one, two = factory.shared_prefix(20, 5, seed=1), factory.shared_prefix(20, 5, seed=2)
    assert one.split()[:20] == two.split()[:20] and len(one.split()) == 25


def test_without_tokenize_calibrates_from_usage(with_mock):
    factory = with_mock(MockConfig(tokenize_endpoint=False), lambda s: calibrated(s, api="chat"))
    assert not factory.exact and factory.source == "usage-calibrated"
    assert factory.tokens_per_word == pytest.approx(1.0) and factory.word_count(100) == 100
