#!/usr/bin/env bash
# `make demo`: the embedded default (SQLite, SQLite-backed Celery broker, the simulator).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p var
if [ -z "${SECRET_KEY:-}" ] && [ ! -s var/secret_key ]; then
  .venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))' > var/secret_key
  chmod 600 var/secret_key
fi
exec .venv/bin/python manage.py demo "$@"
