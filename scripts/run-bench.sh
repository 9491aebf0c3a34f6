#!/usr/bin/env bash
# `make bench`: every performance benchmark in benchmarks/perf/, each printing its figures and ratios.
# Pass names to run a subset: `make bench BENCH="ingest record"`.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export SECRET_KEY="${SECRET_KEY:-kvselect-bench-only}"
names=${BENCH:-$(ls benchmarks/perf/*.py | xargs -n1 basename | sed 's/\.py$//' | grep -v '^__init__$')}
for name in $names; do
  echo "== benchmarks/perf/$name.py"
  .venv/bin/python -m "benchmarks.perf.$name"
done
