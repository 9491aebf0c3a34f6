import numpy as np

from benchmarks.harness import lengths


def test_drawn_lengths_follow_the_mean_and_p95_and_never_pass_the_max():
    drawn = lengths.draw(lengths.distribution(512, 1500, 8192), 20_000)
    assert abs(np.mean(drawn) - 512) / 512 < 0.08
    assert abs(np.percentile(drawn, 95) - 1500) / 1500 < 0.1
    assert max(drawn) <= 8192 and min(drawn) >= 1


def test_without_a_p95_a_long_tail_is_assumed_and_capped_by_max():
    drawn = lengths.draw(lengths.distribution(100, None, 150), 5000)
    assert max(drawn) <= 150 and len(set(drawn)) > 10


def test_the_sampler_is_fixed_without_a_distribution_and_varied_with_one():
    fixed = lengths.length_sampler({}, 64, 16)
    assert {fixed(i) for i in range(10)} == {(64, 16)}
    varied = lengths.length_sampler({"input_distribution": lengths.distribution(64, 256)}, 64, 16)
    assert len({varied(i)[0] for i in range(50)}) > 10 and varied.source["input"]["p95"] == 256
