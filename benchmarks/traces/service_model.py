"""How long a request occupies the engine when a trace did not record it: the statistics and the
replay hold such a request in flight this long. A leaf (numpy only), so the trace services set it
from the selection's latency budget without loading the readers (pandas)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads with the first durations (the trace statistics), not with the pages
    import numpy as np


@dataclass(frozen=True)
class ServiceModel:
    """How long a request occupies the engine when the trace did not record it (ms)."""

    ttft_ms: float = 500.0
    tpot_ms: float = 50.0
    source: str = "default"  # or "latency budget": where the two figures come from, said with the figure

    def duration_s(self, output_tokens: np.ndarray) -> np.ndarray:
        import numpy as np

        return (self.ttft_ms + self.tpot_ms * np.maximum(output_tokens - 1, 0)) / 1000.0

    def describe(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "source": self.source}
