"""The validation page's form: one field per planned parameter of a test, typed after its default."""

from __future__ import annotations

from typing import Any, Mapping

from django import forms
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from benchmarks import presentation
from selection.web import AccessibleErrorsMixin

# Labels of the planned parameters (benchmarks.harness.workloads.plan), as words with their units;
# a parameter not listed here is named by `param_label` from its key.
PARAM_LABELS = {
    "concurrency": pgettext_lazy("validation parameter", "Concurrent requests"),
    "duration_s": pgettext_lazy("validation parameter", "Duration (s)"),
    "warmup_s": pgettext_lazy("validation parameter", "Warm-up (s)"),
    "ramp_up_s": pgettext_lazy("validation parameter", "Ramp-up (s)"),
    "input_tokens": pgettext_lazy("validation parameter", "Input tokens per request"),
    "output_tokens": pgettext_lazy("validation parameter", "Output tokens per request"),
    "abort_fraction": pgettext_lazy("validation parameter", "Share of requests aborted mid-stream (0-1)"),
    "settle_s": pgettext_lazy("validation parameter", "Settling time after the load (s)"),
    "drain_timeout_s": pgettext_lazy("validation parameter", "Drain timeout (s)"),
    "rungs": pgettext_lazy("validation parameter", "Context lengths to try (tokens)"),
    "repeats": pgettext_lazy("validation parameter", "Repeats per context length"),
    "background_concurrency": pgettext_lazy("validation parameter", "Background concurrent requests"),
    "background_input_tokens": pgettext_lazy("validation parameter", "Background input tokens per request"),
    "background_output_tokens": pgettext_lazy("validation parameter", "Background output tokens per request"),
    "background_lead_s": pgettext_lazy("validation parameter", "Background traffic before the long request (s)"),
    "with_background": pgettext_lazy("validation parameter", "Run background traffic"),
    "required_tokens": pgettext_lazy("validation parameter", "Required context (tokens)"),
    "background_timeout_s": pgettext_lazy("validation parameter", "Background request timeout (s)"),
    "max_model_len": pgettext_lazy("validation parameter", "Engine context limit (tokens)"),
    "recommended_duration_s": pgettext_lazy("validation parameter", "Recommended soak duration (s)"),
    "max_kv_slope_per_hour": pgettext_lazy("validation parameter", "Largest allowed KV usage rise per hour (0-1)"),
    "max_gpu_memory_slope_mib_per_hour": pgettext_lazy(
        "validation parameter", "Largest allowed GPU memory rise per hour (MiB)"
    ),
    "max_preemption_rate_ratio": pgettext_lazy("validation parameter", "Largest allowed preemption-rate growth (x)"),
    "max_fragmentation_rise": pgettext_lazy("validation parameter", "Largest allowed fragmentation rise (0-1)"),
    "metrics_interval_s": pgettext_lazy("validation parameter", "Engine metrics interval (s)"),
    "sessions": pgettext_lazy("validation parameter", "Sessions"),
    "warm_sessions": pgettext_lazy("validation parameter", "Sessions resumed at once (warm reference)"),
    "never_swap_sessions": pgettext_lazy("validation parameter", "Never-swap sessions (kept active, resumed last)"),
    "history_tokens": pgettext_lazy("validation parameter", "Conversation history per session (tokens)"),
    "pressure_factor": pgettext_lazy("validation parameter", "Pressure: new tokens while idle, x KV capacity"),
    "max_pressure_requests": pgettext_lazy("validation parameter", "Most pressure requests"),
    "active_turn_gap_s": pgettext_lazy("validation parameter", "Pause between the never-swap sessions' turns (s)"),
    "resume_parallel": pgettext_lazy("validation parameter", "Timed turns sent at once"),
    "divergence_tolerance_token": pgettext_lazy("validation parameter", "Continuation may diverge from token"),
    "max_resume_over_recompute": pgettext_lazy("validation parameter", "Largest resume / recompute TTFT ratio"),
    "allow_cache_reset": pgettext_lazy("validation parameter", "Clear the engine's prefix cache for the recompute"),
    "idle_fraction": pgettext_lazy("validation parameter", "Share of sessions left idle (0-1)"),
    "idle_s": pgettext_lazy("validation parameter", "Idle time between turns (s)"),
    "turn_input_tokens": pgettext_lazy("validation parameter", "Input tokens per turn"),
    "pressure_concurrency": pgettext_lazy("validation parameter", "Concurrent requests while sessions are idle"),
    "pressure_input_tokens": pgettext_lazy("validation parameter", "Input tokens of that traffic"),
    "seed": pgettext_lazy("validation parameter", "Random seed"),
    "parallel": pgettext_lazy("validation parameter", "Sessions sent at once"),
    "requests": pgettext_lazy("validation parameter", "Requests"),
    "prefix_tokens": pgettext_lazy("validation parameter", "Shared prefix (tokens)"),
    "suffix_tokens": pgettext_lazy("validation parameter", "Unique suffix (tokens)"),
    "kv_capacity_tokens": pgettext_lazy("validation parameter", "KV-cache capacity (tokens)"),
    "window_s": pgettext_lazy("validation parameter", "Drift window (s)"),
    "max_drift_pct": pgettext_lazy("validation parameter", "Largest allowed drift (%)"),
    "input_distribution": pgettext_lazy("validation parameter", "Input lengths (JSON: mean, p95, max tokens)"),
    "output_distribution": pgettext_lazy("validation parameter", "Output lengths (JSON: mean, p95, max tokens)"),
    "long_input_tokens": pgettext_lazy("validation parameter", "Long traffic group from (input tokens)"),
    "target_concurrency": pgettext_lazy("validation parameter", "Target concurrent requests (first step)"),
    "rate": pgettext_lazy("validation parameter", "Request rate, open loop (requests/s; empty: closed loop)"),
    "step_factors": pgettext_lazy("validation parameter", "Steps up, as multiples of the target"),
    "down_factors": pgettext_lazy("validation parameter", "Steps back down, as multiples of the target"),
    "step_duration_s": pgettext_lazy("validation parameter", "Duration of each step (s)"),
    "recovery_s": pgettext_lazy("validation parameter", "Duration of the recovery step (s)"),
    "recovery_bound_s": pgettext_lazy("validation parameter", "Longest allowed time to recover (s)"),
    "max_error_rate": pgettext_lazy("validation parameter", "Largest error share of a sustainable step (0-1)"),
    # model switch
    "before_s": pgettext_lazy("validation parameter", "Steady load before the switch (s)"),
    "switched_s": pgettext_lazy("validation parameter", "Load on the new version (s)"),
    "after_s": pgettext_lazy("validation parameter", "Load after the rollback (s)"),
    "switch_mode": pgettext_lazy("validation parameter", "How to switch (endpoint, or restart on the simulator)"),
    "switch_endpoint": pgettext_lazy("validation parameter", "Endpoint of the new version (URL)"),
    "switch_model": pgettext_lazy("validation parameter", "Served model name on the new endpoint"),
    "switch_metrics_url": pgettext_lazy("validation parameter", "Metrics URL of the new endpoint"),
    "restart_config": pgettext_lazy("validation parameter", "Simulator settings of the new version (JSON)"),
    "restart_downtime_s": pgettext_lazy("validation parameter", "Simulator restart downtime (s)"),
    "restart_graceful": pgettext_lazy("validation parameter", "Simulator restart is graceful (true/false)"),
    "recovery_requests": pgettext_lazy("validation parameter", "Good requests in a row that mean recovered"),
    "max_switch_errors": pgettext_lazy("validation parameter", "Failed requests allowed across the switch"),
    "max_recovery_s": pgettext_lazy("validation parameter", "Longest allowed time back within the budget (s)"),
    # isolation
    "tenant_a_rate": pgettext_lazy("validation parameter", "Tenant A requests per second"),
    "tenant_a_input_tokens": pgettext_lazy("validation parameter", "Tenant A input tokens per request"),
    "tenant_a_output_tokens": pgettext_lazy("validation parameter", "Tenant A output tokens per request"),
    "tenant_b_concurrency": pgettext_lazy("validation parameter", "Tenant B concurrent long requests"),
    "tenant_b_input_tokens": pgettext_lazy("validation parameter", "Tenant B input tokens per request"),
    "tenant_b_output_tokens": pgettext_lazy("validation parameter", "Tenant B output tokens per request"),
    "alone_s": pgettext_lazy("validation parameter", "Tenant A alone (s)"),
    "flood_lead_s": pgettext_lazy("validation parameter", "Tenant B's flood before tenant A is measured (s)"),
    "flood_s": pgettext_lazy("validation parameter", "Tenant A under the flood (s)"),
    "use_priority": pgettext_lazy("validation parameter", "Send the priority field (priority scheduling)"),
    "tenant_a_priority": pgettext_lazy("validation parameter", "Tenant A priority (lower first)"),
    "tenant_b_priority": pgettext_lazy("validation parameter", "Tenant B priority (lower first)"),
    "max_ttft_slowdown": pgettext_lazy("validation parameter", "Largest allowed TTFT slowdown of tenant A (x)"),
    "ttft_p95_ms": pgettext_lazy("validation parameter", "TTFT p95 budget (ms)"),
    "tpot_p95_ms": pgettext_lazy("validation parameter", "TPOT p95 budget (ms)"),
    "e2e_p95_ms": pgettext_lazy("validation parameter", "End-to-end p95 budget (ms)"),
}
UNIT_SUFFIXES = (("_ms", "ms"), ("_s", "s"), ("_pct", "%"), ("_tokens", "tokens"))
ACRONYMS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "kv": "KV", "e2e": "end-to-end", "p95": "p95", "p99": "p99"}


def param_label(key: str):
    """A parameter's label: its entry in PARAM_LABELS, else words from its key ("settle_s" -> "Settle (s)")."""
    if key in PARAM_LABELS:
        return PARAM_LABELS[key]
    unit = ""
    for suffix, name in UNIT_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            key, unit = key[: -len(suffix)], f" ({name})"
            break
    words = [ACRONYMS.get(word, word) for word in key.split("_") if word]
    text = " ".join(words) or key
    return text[0].upper() + text[1:] + unit


class ValidationParamsForm(AccessibleErrorsMixin, forms.Form):
    """One field per planned parameter of a test, typed after the planned value."""

    label = forms.CharField(label=_("Run label"), required=False, max_length=200)
    PARAM_ERRORS = {
        "empty_list": _("give at least one number, separated by commas"),
        "not_numbers": _("expected numbers separated by commas, got “%(detail)s”"),
        "not_positive": _("every value must be positive"),
        "bad_json": _("not valid JSON (%(detail)s)"),
    }

    def __init__(self, *args, plan: Mapping[str, Any], test: str, **kwargs):
        kwargs.setdefault("prefix", test)
        super().__init__(*args, **kwargs)
        self.test, self.plan, self.kinds = test, dict(plan), {}
        for key, default in self.plan.items():
            kind = presentation.param_kind(default)
            self.kinds[key] = kind
            label = param_label(key)
            if kind == "bool":
                field = forms.BooleanField(label=label, required=False, initial=default)
            elif kind == "int":
                field = forms.IntegerField(label=label, initial=default, min_value=0)
            elif kind == "float":
                field = forms.FloatField(label=label, initial=default, min_value=0)
            else:
                field = forms.CharField(
                    label=label,
                    required=False,
                    initial=presentation.format_param(default, kind),
                    help_text=_("comma-separated numbers")
                    if kind.endswith("_list")
                    else (_("JSON; empty for none") if kind == "json" else ""),
                )
            self.fields[key] = field

    def clean(self):
        data = super().clean()
        for key, kind in self.kinds.items():
            if kind in ("int_list", "float_list", "json", "text") and key not in self.errors:
                try:
                    data[key] = presentation.parse_param(self.data.get(self.add_prefix(key), ""), kind)
                except presentation.ParamError as error:
                    self.add_error(key, self.PARAM_ERRORS[error.code] % {"detail": error.detail})
        return data

    def params(self) -> dict[str, Any]:
        return {key: self.cleaned_data.get(key) for key in self.kinds}
