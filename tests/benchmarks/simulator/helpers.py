"""Helpers for driving the simulator engine directly (virtual clock, no HTTP)."""

from __future__ import annotations

from benchmarks.simulator.block_keys import KeySpace
from benchmarks.simulator.config import SimConfig
from benchmarks.simulator.engine import Engine
from benchmarks.simulator.sequence import Sequence


def small_config(**changes) -> SimConfig:
    """A small pool on the default H100/8B timing model."""
    values = dict(num_blocks=400, max_model_len=4096)
    values.update(changes)
    return SimConfig(**values)


class Driver:
    """Runs an engine on a virtual clock; checks block conservation after every step."""

    def __init__(self, config: SimConfig, coalesce: bool = False) -> None:
        self.engine = Engine(config, coalesce=coalesce)
        self.space = KeySpace()
        self.now = 0.0
        self.count = 0

    def request(self, prompt: int, output: int, prefix_id=None, prefix_tokens=0, session_id=None) -> Sequence:
        self.count += 1
        seq = Sequence(self.count, prompt, output, self.now, self.space.keys(prefix_id, prefix_tokens, session_id))
        self.engine.add(seq, self.now)
        return seq

    def step(self):
        outcome = self.engine.step(self.now)
        self.now += outcome.duration
        self.engine.check_invariants()
        return outcome

    def run(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.engine.has_work():
                return
            self.step()
        raise AssertionError("engine did not drain")

    def idle(self, seconds: float) -> None:
        self.now += seconds
