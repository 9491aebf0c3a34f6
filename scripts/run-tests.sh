#!/usr/bin/env bash
# The whole suite. In CI (CI=true) every service must be reachable: nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export SECRET_KEY="${SECRET_KEY:-kvselect-tests-only-secret-key}"  # the system check below needs one (tests only)
export PYTHONUNBUFFERED=1
# Lint first: a tree that ruff refuses does not get to the tests.
$PY -m ruff check .
$PY -m ruff format --check .
$PY manage.py check --fail-level ERROR >/dev/null
set +e
$PY -m pytest "$@"
rc=$?
set -e
# pytest's 5 = "no tests collected": that is a failure for us.
exit $rc
