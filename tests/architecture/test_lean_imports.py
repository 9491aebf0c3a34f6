"""Start-up stays lean (issue 39): the URL conf, the models, the services and the task modules, which
every web process, the scoring worker and each `manage.py` command import, load no PDF renderer, no
signing library, no data-frame or array library, no HTTP client and no load-generator module. Those
are imported by the request or task that needs them: the render task and `records.rendering`
(WeasyPrint), signing and verification (pyHanko, through the `signing` package's names, resolved on
first use), the trace import and the parse task (pandas, pyarrow), scoring and the statistics
(numpy), a validation run's load (`benchmarks.validation.loadtest`, aiohttp through
`harness.safety_aiohttp`) and the test specs a page shows (`benchmarks.validation.specs`).

Checked in a fresh interpreter, since this test process has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What the web and scoring processes import at start-up: the URL conf (every view, form and API
# serializer), the models (django.setup), every service module and both apps' tasks.
STARTUP = """
import importlib, json, pathlib, sys
import django
django.setup()
from django.urls import get_resolver
get_resolver().url_patterns
root = pathlib.Path.cwd()
services = sorted(root.glob("selection/**/services.py")) + sorted(root.glob("benchmarks/**/services.py"))
for path in services + [root / "benchmarks/validation/dispatch.py"]:
    importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
importlib.import_module("selection.tasks")
importlib.import_module("benchmarks.tasks")
print(json.dumps(sorted(sys.modules)))
"""

# Each costs 0.05 to 0.5 s of every process's start-up (`python -X importtime manage.py check`).
FORBIDDEN = (
    "weasyprint",
    "pandas",
    "matplotlib",
    "pyarrow",
    "pyhanko",
    "aiohttp",
    "numpy",
    "uharfbuzz",
    "fontTools",
    "prometheus_client",
)
# The harness modules a page or a service may use: leaves with no HTTP client, event loop or trace
# reader (the outbound allow-list, the candidate probes, the documented cache model, the estimates,
# the client's timing rules). Anything else under benchmarks.harness is the load generator.
HARNESS_LEAVES = {
    "benchmarks.harness",
    "benchmarks.harness.cache_model",
    "benchmarks.harness.client_timing",
    "benchmarks.harness.estimates",
    "benchmarks.harness.identity",
    "benchmarks.harness.nvml",
    "benchmarks.harness.prometheus",
    "benchmarks.harness.safety",
}
# The trace modules that read no file (the readers and the statistics load pandas).
TRACE_LEAVES = {
    "benchmarks.traces",
    "benchmarks.traces.catalog",
    "benchmarks.traces.proposal",
    "benchmarks.traces.service_model",
}


def modules_at_startup() -> set[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "architecture-test"}
    out = subprocess.run(
        [sys.executable, "-c", STARTUP], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_web_and_scoring_processes_start_without_the_renderer_pandas_or_the_load_generator():
    loaded = modules_at_startup()
    heavy = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN)
    harness = sorted(m for m in loaded if m.startswith("benchmarks.harness") and m not in HARNESS_LEAVES)
    traces = sorted(m for m in loaded if m.startswith("benchmarks.traces") and m not in TRACE_LEAVES)
    assert (heavy[:5], harness, traces) == ([], [], [])
    assert not [m for m in loaded if m.startswith("selection.certificates.signing.")]  # only the package
    assert "benchmarks.harness.workloads" not in loaded
    assert "selection.records.pdf" not in loaded  # the renderer module itself, not only WeasyPrint


def test_the_lazy_doors_load_what_they_promise():
    """The modules that load the heavy parts on first use give the real ones (no stand-in)."""
    from benchmarks.harness import workloads
    from benchmarks.validation import specs

    assert specs.registry() is workloads
    assert specs.spec("concurrency_stress") is workloads.SPECS["concurrency_stress"]
    assert specs.estimate("concurrency_stress", specs.plan("concurrency_stress", {}, None)) == workloads.estimate(
        "concurrency_stress", workloads.plan("concurrency_stress", {}, None)
    )


def test_the_signing_package_gives_every_public_name_from_its_module():
    """The package imports nothing until a name is used; each name is the defining module's object."""
    import importlib

    from selection.certificates import signing

    for name in signing.__all__:
        module = importlib.import_module(f"selection.certificates.signing.{signing._HOME[name]}")
        assert getattr(signing, name) is getattr(module, name), name
    assert set(signing.__all__) <= set(dir(signing))


def test_the_verify_command_loads_the_verifier_but_not_the_signer_or_the_renderer():
    """`verify-record` (issue 39: under 1.5 s whole) needs pyHanko's validation, not the stamp fonts
    (HarfBuzz, fontTools), the PKCS#11 tokens or WeasyPrint."""
    script = STARTUP.replace(
        "print(json.dumps",
        "from django.core.management import load_command_class\n"
        "load_command_class('selection', 'verify-record')\n"
        "from selection.records import verification\n"
        "from selection.certificates.signing import verification as pdf_verification\n"
        "print(json.dumps",
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "SECRET_KEY": "architecture-test"}
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=True
    )
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    assert "pyhanko.sign.validation" in loaded
    assert sorted(m for m in loaded if m.split(".")[0] in ("uharfbuzz", "fontTools", "weasyprint", "pkcs11")) == []


def test_every_task_module_imports_the_celery_app_itself():
    """`config/__init__.py` does not import the Celery app (a command that runs no task starts without
    Celery), so each module that defines a task must import `config.celery`: else its `@shared_task`
    could bind to Celery's default app, with no broker settings, in a process that imported it first."""
    import ast

    missing = []
    for path in sorted(ROOT.glob("selection/**/*.py")) + sorted(ROOT.glob("benchmarks/**/*.py")):
        source = path.read_text(encoding="utf-8")
        if "shared_task" not in source:
            continue
        tree = ast.parse(source)
        imported = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        if "config.celery" not in imported:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def test_celery_finds_the_app_from_the_config_package():
    """`celery -A config worker` (the README's commands) resolves the app without the package importing it."""
    from celery.app.utils import find_app

    import config
    from config.celery import app

    assert find_app("config") is app and config.celery_app is app
