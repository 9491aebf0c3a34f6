#!/usr/bin/env bash
# `make demo`: the embedded default (SQLite, SQLite-backed Celery broker, the simulator).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p var
if [ -z "${SECRET_KEY:-}" ] && [ ! -s var/secret_key ]; then
  .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))' > var/secret_key
  chmod 600 var/secret_key
fi
# Signatures in the demo are timestamped by the development TSA (PAdES B-LT, flagged development).
export KVSELECT_TSA_URL="${KVSELECT_TSA_URL:-dev}"
exec .venv/bin/python manage.py demo "$@"
