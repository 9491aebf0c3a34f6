"""Small presentation helpers for kvselect templates."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from datetime import date, datetime

from django import template
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.utils import timezone
from django.utils.formats import number_format
from django.utils.html import conditional_escape, escape, format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import capfirst
from django.utils.translation import gettext, gettext_lazy, pgettext

from selection.domain import criteria as criteria_domain
from selection.i18n import (
    certificate_name,
    criterion_name,
    domain_text,
    message_html,
    message_text,
    person_name,
    translate_test,
)
from selection.i18n import role_name as role_label
from selection.models import Constraints, Selection
from selection.records.staleness import staleness
from selection.records.summary import item_label, item_name

register = template.Library()


@register.simple_tag
def inputs_changed(selection):
    """What changed since the selection's current signed decision was signed (None: nothing)."""
    return staleness(selection) if getattr(selection, "pk", None) else None


VERDICT_STATUS_LABELS = {
    "pass": gettext_lazy("pass"),
    "fail": gettext_lazy("fail"),
    "inconclusive": gettext_lazy("inconclusive"),
    "insufficient_data": gettext_lazy("insufficient data"),
    "not_exercised": gettext_lazy("not exercised"),
    "not_judged": gettext_lazy("not judged"),
    "not_applicable": gettext_lazy("not applicable"),
}


@register.filter
def verdict_status(status: str) -> str:
    """A verdict status (benchmarks.verdicts.STATUSES) in the reader's language."""
    return str(VERDICT_STATUS_LABELS.get(status, status))


# a launch flag and the value that follows it ("--scheduling-policy priority", "--kv-offloading-size 8")
LAUNCH_FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9-]*(?:[ =](?!-)[^\s;,，；）)]+)?")


@register.filter
def flags_as_code(text) -> str:
    """Text with the engine launch flags it names, each with its value ("--kv-offloading-size 8"), set as
    code: a flag is typed as it stands in any language, so a Chinese cost formula or chosen configuration
    shows it apart from its words."""
    escaped = str(conditional_escape(text if text is not None else ""))
    return mark_safe(LAUNCH_FLAG.sub(lambda m: f"<code>{m.group(0)}</code>", escaped))


# An engine's Prometheus metric as a verdict's detail quotes it ("vllm:request_queue_time_seconds",
# "trtllm_request_queue_time_seconds"): the name to look up on the engine's /metrics, code in any language.
ENGINE_METRIC = re.compile(
    r"(?<![\w:./-])(?:vllm|sglang|lmdeploy|llamacpp|trtllm|tgi)[:_][a-z0-9_:]*[a-z0-9](?![\w:/-])"
)


@register.filter
def metrics_as_code(text, css_class: str = "") -> str:
    """Text with the engine metrics it names (`ENGINE_METRIC`) set as code (with `css_class`, the record's
    "mono"), the rest escaped: a verdict's detail reads as prose around the metric it was read from."""
    escaped = str(conditional_escape(text if text is not None else ""))
    opening = format_html('<code class="{}">', css_class) if css_class else "<code>"
    return mark_safe(ENGINE_METRIC.sub(lambda m: f"{opening}{m.group(0)}</code>", escaped))


@register.filter
def as_code(value) -> str:
    """A name typed as it stands in every language (a file, a scrape job, a label) set as code, escaped:
    for a translated sentence that names it (`{% blocktranslate with job=job|as_code %}`)."""
    return format_html('<code class="mono">{}</code>', value if value is not None else "")


@register.filter
def check_item(item) -> str:
    """A project check's item ("audit_trail") by its name in the active language."""
    return item_name(str(item or ""))


@register.filter
def open_item(key) -> str:
    """One of a record's open items ("readiness.logs", "acceptance.pilot_result") as a reader names it."""
    section, _dot, item = str(key or "").partition(".")
    return item_label(section, item) if item else item_name(section)


@register.filter
def person(user) -> str:
    """A user's name as their script writes it (see i18n.person_name); a stored login name (a run's
    "started by", an override's "kept by") reads as the person's name when they have one."""
    if isinstance(user, str):
        if not user:
            return ""
        found = get_user_model().objects.filter(username=user).first()
        return person_name(found) if found is not None else user
    return person_name(user)


@register.filter
def when(value, precision: str = "") -> str:
    """A moment as kvselect writes it everywhere: "2026-03-02 14:05 UTC+01:00", in the active time
    zone (the user's, see `selection.middleware.TimezoneMiddleware`); `when:"s"` adds seconds.
    Takes datetimes, dates ("2026-03-02") and the ISO strings stored in record snapshots."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value) if "T" in value or " " in value else date.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            value = timezone.make_aware(value, timezone.get_default_timezone())
        local = timezone.localtime(value)
        offset = local.utcoffset()
        minutes = int(offset.total_seconds() // 60) if offset is not None else 0
        sign = "+" if minutes > 0 else "-"
        zone = "UTC" if minutes == 0 else f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
        pattern = "%Y-%m-%d %H:%M:%S" if precision == "s" else "%Y-%m-%d %H:%M"
        return f"{local.strftime(pattern)} {zone}"
    if isinstance(value, date):
        return value.isoformat()
    return ""


# A team member's role (Membership.Role) as a sentence names it; the choices' labels say what each may do.
MEMBER_ROLES = {
    "architect": gettext_lazy("architect"),
    "reviewer": gettext_lazy("reviewer"),
    "procurement": gettext_lazy("procurement"),
}


@register.filter
def member_role(role) -> str:
    """A team role code ("reviewer") in words in the page's language; "member" without a role."""
    return str(MEMBER_ROLES.get(role) or gettext("member"))


@register.filter
def role_name(role: str) -> str:
    """A signature field or owner role (business, platform, security, seal) in the active language."""
    return role_label(role)


@register.filter
def percent(value, digits: int = 1) -> str:
    """0.2345 -> "23.5%" (a share of 1 shown as a percentage, localised)."""
    try:
        return f"{number_format(float(value) * 100, int(digits))}%"
    except (TypeError, ValueError):
        return "—"


@register.filter
def audit_value(value) -> str:
    """An audit old/new JSON value as short readable text."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):  # a switch's state in words, never Python's True/False
        return gettext("yes") if value else gettext("no")
    if isinstance(value, dict):  # keys are field codes: named as the audit's "what" names them
        return comma().join(f"{audit_field(k)}{colon()}{audit_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, list):
        return comma().join(audit_value(v) for v in value) or "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return plain_number(value)
    return str(value)


def plain_number(value: float) -> str:
    """20000.0 -> "20,000", 0.123456 -> "0.1235", 2e-05 -> "0.00002": never an exponent; whole
    numbers exact, others to four significant digits below 1 and four decimals above."""
    if not math.isfinite(value):
        return str(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    if abs(value) >= 1:
        text = f"{value:,.4f}"
    else:
        text = f"{value:.{3 - math.floor(math.log10(abs(value)))}f}"
    return text.rstrip("0").rstrip(".")


@register.filter
def refused_file(bound_field) -> str:
    """The name of the file a refused form was sent with, on its file field: a browser never keeps a
    chosen file when the page comes back, so the page says which one to choose again ("" otherwise)."""
    form = bound_field.form
    if not (form.is_bound and form.errors) or getattr(bound_field.field.widget, "input_type", "") != "file":
        return ""
    chosen = form.files.get(bound_field.html_name)
    return getattr(chosen, "name", "") or ""


@register.filter
def field_type(bound_field) -> str:
    """The widget's input type ("checkbox", "number", "select", ...) for styling."""
    widget = bound_field.field.widget
    if getattr(widget, "allow_multiple_selected", False) and getattr(widget, "input_type", "") == "checkbox":
        return "checkboxselectmultiple"
    return getattr(widget, "input_type", None) or widget.__class__.__name__.lower()


@register.filter
def domain_name(value):
    """A criterion/dimension/scenario name or description from selection.domain (as a snapshot
    stored it: the English text), translated."""
    return domain_text(value)


@register.filter
def criterion(value):
    """A criterion by its id ("cache_reuse", as scoring rules store it) or its stored English name, in
    the active language: never the id itself."""
    if value in criteria_domain.CRITERIA_BY_ID:
        return criterion_name(value)
    return domain_text(value)


@register.filter
def message(value):
    """A sentence from selection.domain (scenario reason, scoring sentence, note or reason, capacity
    verdict), stored as a message, in the active language; plain text is shown unchanged."""
    return message_text(value)


@register.filter(name="message_html")
def message_as_html(value):
    """`message` with what it quotes from a file (a key path, a column, a value) as code: a refusal of an upload."""
    return message_html(value)


@register.filter
def test_name(value):
    """A validation test id (concurrency_stress, ...) in the active language."""
    return translate_test(value)


# Engines and tools by the names their projects use: ids in data (an engine's capacity rules "vllm",
# an upload's tool "llmperf") are shown as these names, as the product's own copy writes them.
PRODUCT_NAMES = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "llamacpp": "llama.cpp",
    "llama-cpp": "llama.cpp",
    "lmdeploy": "LMDeploy",
    "trtllm": "TensorRT-LLM",
    "tgi": "TGI",
    "llmperf": "LLMPerf",
    "perf_analyzer": "Perf Analyzer",
}


@register.filter
def product_name(value) -> str:
    """An engine's or tool's id ("vllm", "llamacpp") by its product name ("vLLM", "llama.cpp")."""
    text = str(value or "")
    return PRODUCT_NAMES.get(text.lower(), text)


@register.filter
def trace_format(name) -> str:
    """A production trace's format id ("mooncake") by its name in the active language."""
    from selection.traces.forms import trace_format_title

    return trace_format_title(str(name or ""))


@register.filter
def result_format(name) -> str:
    """A result file's format id ("guidellm-csv") by its name: the tool and the file it wrote."""
    from benchmarks.uploads.forms import format_label

    return format_label(str(name or ""))


@register.filter
def clipped(value, columns: int) -> bool:
    """Whether `clip` would cut the text at `columns`: page 1 then points to the annex that states it in full."""
    return clip(value, columns) != " ".join(str(value or "").split())


@register.filter
def clip(value, columns: int) -> str:
    """Text cut to `columns` display columns with "…" (a CJK character takes two, as it does on the
    page): the record's one-page summary bounds each free text by the room it has, in any language."""
    text = " ".join(str(value or "").split())
    used = 0
    for index, char in enumerate(text):
        used += 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        if used > int(columns):
            return text[:index].rstrip() + "…"
    return text


@register.filter
def signer(subject):
    """A certificate subject (an RFC 4514 DN) as the person it names: its common name."""
    return certificate_name(subject)


# How a signed PDF changed after a signature (pyHanko's modification levels), in words.
MODIFICATION_LEVELS = {
    "LTA_UPDATES": gettext_lazy("changed after this signature: validation data and timestamps only"),
    "FORM_FILLING": gettext_lazy("changed after this signature: later owners' signatures filled in"),
    "ANNOTATIONS": gettext_lazy("changed after this signature: annotations added"),
    "OTHER": gettext_lazy("changed after this signature beyond signing"),
}


@register.filter
def modification(level):
    """A signature's modification level (FORM_FILLING, ...) as a sentence; "" for none."""
    if not level or level == "NONE":
        return ""
    return str(MODIFICATION_LEVELS.get(level, MODIFICATION_LEVELS["OTHER"]))


# What an audit entry records, in words (selection.audit's action codes).
AUDIT_ACTIONS = {
    "selection.created": gettext_lazy("Selection created"),
    "selection.changed": gettext_lazy("Selection changed"),
    "selection.archived": gettext_lazy("Selection archived"),
    "selection.restored": gettext_lazy("Selection restored"),
    "constraints.changed": gettext_lazy("Constraint changed"),
    "scenario.inferred": gettext_lazy("Scenario inferred"),
    "scenario.accepted": gettext_lazy("Scenario accepted"),
    "weight.changed": gettext_lazy("Weight changed"),
    "weight.removed": gettext_lazy("Weight removed"),
    "weight.renormalised": gettext_lazy("Weights renormalised"),
    "gates.changed": gettext_lazy("Gates changed"),
    "candidate.added": gettext_lazy("Candidate added"),
    "candidate.changed": gettext_lazy("Candidate changed"),
    "candidate.archived": gettext_lazy("Candidate archived"),
    "candidate.restored": gettext_lazy("Candidate restored"),
    "candidate.deleted": gettext_lazy("Candidate deleted"),
    "candidate.capacity_stated": gettext_lazy("Engine-stated capacity recorded"),
    "candidate.screen_overridden": gettext_lazy("Kept despite the documentation screen"),
    "trace.imported": gettext_lazy("Trace imported"),
    "trace.accepted": gettext_lazy("Trace accepted as the constraints"),
    "token.created": gettext_lazy("Upload token created"),
    "token.revoked": gettext_lazy("Upload token revoked"),
    "upload.confirmed_as_evidence": gettext_lazy("Upload confirmed as evidence"),
    "validation.started": gettext_lazy("Validation run started"),
    "validation.cancel_requested": gettext_lazy("Validation run cancel requested"),
    "record.drafted": gettext_lazy("Record drafted"),
    "record.edited": gettext_lazy("Record draft edited"),
    "record.archived": gettext_lazy("Record draft archived"),
    "record.restored": gettext_lazy("Record draft restored"),
    "record.review_started": gettext_lazy("Record sent to review"),
    "record.approved": gettext_lazy("Record approved"),
    "record.tie_ground_stated": gettext_lazy("Ground stated for choosing among tied candidates"),
    "record.tie_ground_cleared": gettext_lazy("Ground for choosing among tied candidates cleared"),
    "record.fully_approved": gettext_lazy("Record approved by all three owners"),
    "record.signature_prepared": gettext_lazy("Signature prepared"),
    "record.signed": gettext_lazy("Record signed"),
    "record.superseded": gettext_lazy("Record superseded"),
    "record.reevaluation_started": gettext_lazy("Re-evaluation started"),
    "record.open_item_closed": gettext_lazy("Open item closed"),
    "owner.certificate_enrolled": gettext_lazy("Signing certificate enrolled"),
}


def words(code: str) -> str:
    """A code as words ("cost_per_gpu_hour" -> "Cost per gpu hour"): never the identifier itself."""
    text = " ".join(part for part in str(code).replace(".", " ").replace("_", " ").split())
    return text[:1].upper() + text[1:]


@register.filter
def audit_action(action) -> str:
    """An audit action code ("constraints.changed") in words, in the page's language."""
    return str(AUDIT_ACTIONS.get(action) or words(action))


# What an audit entry's field names beyond constraints, criteria and selection fields (setup and
# scoring services write these), in words.
AUDIT_FIELDS = {
    "gates": gettext_lazy("Gates"),
    "scenario": gettext_lazy("Scenario"),
    "mix": gettext_lazy("Scenario mix"),
    "status": gettext_lazy("Status"),
    "upload_token": gettext_lazy("Upload token"),
}


@register.filter
def audit_field(field) -> str:
    """What an audit entry changed, in words: a constraint's or a criterion's name, "candidate #3",
    "record v1 · Platform readiness: logs"; other fields as words, never as their codes."""
    field = str(field or "")
    kind, _sep, rest = field.partition(":")
    if kind in ("candidate", "run") and rest.isdigit():
        return f"{gettext('candidate') if kind == 'candidate' else gettext('run')} #{rest}"
    if kind == "record" and rest.startswith("v"):
        version, _sep, item = rest.partition(":")
        section, _dot, name = item.partition(".")
        label = f"{gettext('record')} {version}"
        return f"{label} · {item_label(section, name)}" if item else label
    if kind == "trace" and rest:
        return f"{gettext('trace')} {rest}…"
    if field in criteria_domain.CRITERIA_BY_ID:
        return criterion_name(field)
    if field in AUDIT_FIELDS:
        return str(AUDIT_FIELDS[field])
    for model in (Constraints, Selection):
        try:
            return capfirst(model._meta.get_field(field).verbose_name)
        except FieldDoesNotExist:
            continue
    return gettext(words(field))  # in the page's language where the words are a msgid


@register.filter
def structured(value) -> bool:
    """Whether an audit value is a structure (shown as JSON in a code block, not flattened)."""
    return isinstance(value, dict) or (isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value))


@register.filter
def as_json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


@register.filter
def names(values) -> str:
    """Names joined as the page's language lists them ("a, b"; Chinese "a、b")."""
    return pgettext("list separator between names", ", ").join(str(v) for v in values or [])


# What a person types or reads verbatim inside a form's label or help text, a test's description or a
# sentence from the domain: a span a translation marks as code with Markdown backticks (`priority`), a
# command-line flag (--disable-radix-cache), a field or metric name with its value (cache_prompt: false,
# cache_prompt false, mem_fraction_static), an engine's metric (vllm:request_queue_time_seconds), a queue
# name (gpu.<label>), a file extension (.pem), a URL path (/metrics), a switch's values (true/false). Shown
# as code, the words around it as prose.
LITERAL = re.compile(
    r"`(?P<quoted>[^`\n]+)`"
    r"|(?<![\w.])manage\.py [a-z][\w-]*(?: (?:--[a-z][\w-]*|[A-Z]+))*"  # a command, with its arguments
    r"|(?<![\w-])--[a-z][\w-]*"
    r"|(?<![\w.-])[a-z][a-z0-9]*:[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w-])"
    r"|(?<![\w.-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?::?\s(?:true|false)(?![\w-]))?(?![\w-])"
    r"|(?<![\w.-])[a-z]+\.<[a-z]+>"
    r"|(?<![\w./])\.(?:pem|crt|cer|der|p12|pfx|gz|csv|jsonl|json|yaml|yml|pdf)(?![\w])"
    r"|(?<![\w/<.])/[a-z][a-z0-9_-]+(?:/[a-z0-9_-]+)*(?![\w/>])"
    r"|(?<![\w/])true/false(?![\w/])"
)


@register.filter
def codes(values) -> str:
    """A value typed or read verbatim (a model id, a version, a request) as <code>; a list of them each as
    <code>, joined as the page's language lists names ("a, b"; Chinese "a、b")."""
    items = [values] if isinstance(values, str) else list(values or [])
    return format_html_join(comma(), "<code>{}</code>", ((item,) for item in items))


@register.filter
def literals(text) -> str:
    """A form's label or help text, a test's description or a domain sentence with the literals in it
    (`LITERAL`) as <code> (a backticked span without its backticks), the rest escaped."""
    text = str(text or "")
    parts, last = [], 0
    for match in LITERAL.finditer(text):
        literal = match.group("quoted") or match.group(0)
        parts += [escape(text[last : match.start()]), format_html("<code>{}</code>", literal)]
        last = match.end()
    return mark_safe("".join([*parts, escape(text[last:])]))  # every piece is escaped above


@register.simple_tag
def colon() -> str:
    """The separator between a label and its value as the page's language writes it (": "; Chinese
    "："): a template writes `{% translate "Phase" %}{% colon %}`, never a literal ASCII colon."""
    return pgettext("separator between a label and its value", ": ")


@register.simple_tag
def full_stop() -> str:
    """The mark that ends a sentence a template puts together from pieces ("."; Chinese "。")."""
    return pgettext("end of a sentence", ".")


@register.simple_tag
def comma() -> str:
    """The separator between the items of a list written out in a template loop (", "; Chinese "、")."""
    return pgettext("list separator between names", ", ")


@register.simple_tag
def semicolon() -> str:
    """The separator between clauses written out in a template ("; "; Chinese "；")."""
    return pgettext("list separator between clauses", "; ")


@register.filter
def clauses(values) -> str:
    """Clauses joined as the page's language separates them ("a; b"; Chinese "a；b")."""
    return pgettext("list separator between clauses", "; ").join(str(v) for v in values or [])
