#!/usr/bin/env bash
# The whole suite. In CI (CI=true) every service must be reachable: nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export SECRET_KEY="${SECRET_KEY:-kvselect-tests-only-secret-key}"  # the system check below needs one (tests only)
export SECRET_KEY="${SECRET_KEY:-kvselect-tests-only-secret-key}"  # the system check below needs one; tests never sign with it
export PYTHONUNBUFFERED=1
$PY manage.py check --fail-level ERROR >/dev/null
set +e
$PY -m pytest "$@"
rc=$?
set -e
# pytest's 5 = "no tests collected": that is a failure for us.
exit $rc
