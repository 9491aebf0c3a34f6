"""Environment defaults for tests, loaded as a pytest plugin before Django settings are read."""

import os

os.environ.setdefault("SECRET_KEY", "kvselect-tests-only-secret-key")
os.environ.setdefault(
    "KVSELECT_VAR_DIR", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "var", "test")
)
