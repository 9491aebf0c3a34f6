"""The README says what the product does: the demo's port and processes, the upload-token page."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from config.celery import QUEUES
from tests.support.readme import readme_topology

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readmes_upload_token_page_and_variable_are_the_pages():
    page = (ROOT / "templates/benchmarks/uploads.html").read_text(encoding="utf-8")
    title = re.search(r'{% block title %}{% translate "([^"]+)" %}', page).group(1)
    variable = re.search(r"Authorization: Token \$(\w+)", page).group(1)
    assert f"**{title}** page" in README
    assert README.count(f"${variable}") >= 1 and f"secrets.{variable}" in README
    assert not re.findall(r"Token \$(?!" + variable + r")\w+", README)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_passes_the_port_on():
    out = subprocess.run(["make", "-n", "demo", "PORT=8001"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert 'scripts/demo.sh --port "8001"' in out.stdout
    assert "make demo PORT=8001" in README and "Ctrl+C" in README


def test_the_readmes_production_topology_is_gunicorn_a_worker_per_queue_and_one_beat():
    """Issue 38 item 4 (tests/reliability/test_real_services.py starts these very lines)."""
    commands = [shlex.split(line) for line in readme_topology()]
    assert [c[0] for c in commands].count("gunicorn") == 1
    assert sum(1 for c in commands if c[:4] == ["celery", "-A", "config", "beat"]) == 1
    workers = [c for c in commands if c[:4] == ["celery", "-A", "config", "worker"]]
    consumed = [c[c.index("--queues") + 1] for c in workers]
    assert sorted(consumed) == sorted(q if q != "gpu" else "gpu.<pool>" for q in QUEUES)  # one worker each
    assert all("-B" not in c and "--beat" not in c for c in workers)  # beat runs once, on its own


def readme_hand_start_block() -> list[str]:
    block = re.search(r"To start the processes by hand.*?```sh\n(.*?)```", README, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


@pytest.mark.django_db
def test_the_readmes_hand_start_block_starts_what_the_demo_starts(engines):
    """Every simulator the demo starts (its plan, from DEMO_CANDIDATES and the catalog's versions), the
    worker as the demo runs it, and a kill for each (issue 37 item 5: the block had drifted to three)."""
    import shlex

    from selection.management.commands.demo import DEMO_CANDIDATES, simulator_plan
    from selection.management.demo_processes import simulator_command

    lines = readme_hand_start_block()
    plan = simulator_plan({slug: engines[slug].versions[0] for slug, _profile, _extra in DEMO_CANDIDATES})
    expected = [
        shlex.join(simulator_command(port, profile, flags, python=".venv/bin/python")) + " &"
        for _slug, _key, port, profile, flags in plan
    ]
    assert lines[: len(expected)] == expected
    worker = lines[len(expected)]
    assert worker.startswith(f".venv/bin/celery -A config worker -B -Q {','.join(QUEUES)} ") and worker.endswith("&")
    jobs = len(expected) + 1
    assert lines[-1].startswith("kill " + " ".join(f"%{n}" for n in range(1, jobs + 1)) + " ")


def test_the_readme_names_every_demo_account():
    from selection.management.commands.demo import PERSONS

    for username, first, last in [("architect", "Demo", "Architect"), *PERSONS.values()]:
        name = f"{last}{first}" if first.isascii() is False else f"{first} {last}"  # 张伟: family name first
        assert f"| `{username}` | {name} |" in README
    accounts = README.split("**Accounts** (")[1].split("```")[0]
    assert "post-launch observer" in accounts and "`observer`" in accounts
