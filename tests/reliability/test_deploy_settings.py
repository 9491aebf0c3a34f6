import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.reliability


def manage(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "DEBUG"}}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        SECRET_KEY="p" * 20 + "roduction-Key-9f8e7d6c5b4a3210zyxw",
        KVSELECT_TLS="1",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/0",
        KVSELECT_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_missing_secret_key_fails_the_system_check(tmp_path):
    result = manage("check", KVSELECT_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "kvselect.E001" in result.stdout + result.stderr


def test_security_headers(client):
    response = client.get("/api/v1/selections/")
    assert "default-src 'self'" in response["Content-Security-Policy"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["X-Frame-Options"] == "DENY"
