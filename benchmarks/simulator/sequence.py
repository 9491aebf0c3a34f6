"""One request inside the engine (`Sequence`), the states it moves through, and what one scheduler
iteration reports (`StepOutcome`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

from benchmarks.simulator.block_keys import BlockKeys, TokenStream

WAITING, PREFILL, DECODE, FINISHED = "waiting", "prefill", "decode", "finished"


class Sequence:
    """One request inside the engine."""

    __slots__ = (
        "request_id",
        "prompt_len",
        "max_tokens",
        "arrival",
        "keys",
        "stream",
        "status",
        "order",
        "computed",
        "target",
        "out_done",
        "shared",
        "private",
        "enter_g",
        "enter_kv",
        "enter_out",
        "finish_g",
        "need_r",
        "static",
        "hit_tokens",
        "preemptions",
        "swapped_blocks",
        "swapped_in",
        "first_scheduled",
        "first_token_t",
        "finish_t",
        "finish_reason",
        "error",
        "emitted",
        "user",
        "priority",
        "slot",
    )

    def __init__(
        self,
        request_id: Any,
        prompt_len: int,
        max_tokens: int,
        arrival: float,
        keys: BlockKeys,
        stream: TokenStream | None = None,
        user: Any = None,
        priority: int = 0,
    ) -> None:
        self.request_id, self.prompt_len, self.max_tokens, self.arrival = request_id, prompt_len, max_tokens, arrival
        self.keys, self.stream, self.user = keys, stream, user
        self.priority = priority  # lower first under the "priority" scheduling policy (vLLM's convention)
        self.status = WAITING
        self.order = 0
        self.computed = 0
        self.target = prompt_len
        self.out_done = 0
        self.shared: list[Hashable] = []
        self.private = 0
        self.enter_g = self.enter_kv = self.enter_out = 0
        self.finish_g = -1
        self.need_r = -1
        self.static = False
        self.hit_tokens = 0
        self.preemptions = 0
        self.swapped_blocks = 0
        self.swapped_in = False
        self.first_scheduled: float | None = None
        self.first_token_t: float | None = None
        self.finish_t: float | None = None
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.emitted = 0  # tokens handed to the client (live mode)
        self.slot: int | None = None  # the llama.cpp-style slot it runs in (the `slots` strategy)


@dataclass
class StepOutcome:
    duration: float
    steps: int = 1
    first_token: list[Sequence] = field(default_factory=list)  # prefill completed: emitted a token
    decoded: list[Sequence] = field(default_factory=list)  # live mode: decode seqs that emitted one token
    finished: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
