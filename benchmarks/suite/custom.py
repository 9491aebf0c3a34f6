"""Any other benchmark result uploaded from CI (no number, never run by kvselect): its row of the suite."""

from __future__ import annotations

from benchmarks.suite.base import ValidationTest
from selection.domain.messages import marked as _

TEST = ValidationTest(
    "custom",
    None,
    _("Custom"),
    _("Any other benchmark result uploaded from CI."),
    _("what the uploaded benchmark measured"),
    ("latency_vs_load", "kv_usage"),
    runnable=False,
    stands_in_for="concurrency_stress",  # read as a load at the target when the candidate has no stress run
)
