#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/.."
for script in benchmarks/perf/*.py; do
  [ "$(basename "$script")" = "__init__.py" ] && continue
  echo "== $script"
  .venv/bin/python "$script"
done
