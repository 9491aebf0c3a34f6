#!/usr/bin/env bash
# `make bench`: every performance benchmark in benchmarks/perf/, each printing its figures and ratios.
# Pass names to run a subset: `make bench BENCH="ingest record"`. PEERS=1 first installs the load
# clients the harness benchmark runs side by side with kvselect (scripts/install-bench-peers.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export SECRET_KEY="${SECRET_KEY:-kvselect-bench-only}"
if [ "${PEERS:-0}" = "1" ]; then
  bash scripts/install-bench-peers.sh
fi
names=${BENCH:-$(ls benchmarks/perf/*.py | xargs -n1 basename | sed 's/\.py$//' | grep -v '^__init__$' \
  | grep -v -x -e wire_mock -e side_by_side)}
for name in $names; do
  echo "== benchmarks/perf/$name.py"
  .venv/bin/python -m "benchmarks.perf.$name"
done
