"""kvselect settings: everything comes from the environment (12-factor), with safe defaults.

The embedded default (no DATABASE_URL, no CELERY_BROKER_URL) is a SQLite database and a
SQLite-backed Celery broker under var/, for a laptop demo. Production sets both.
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("KVSELECT_VAR_DIR", BASE_DIR / "var"))
VAR_DIR.mkdir(parents=True, exist_ok=True)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


DEBUG = env_bool("DEBUG", False)
# A missing SECRET_KEY with DEBUG off is reported by the system check kvselect.E001.
SECRET_KEY = os.environ.get("SECRET_KEY", "")
if not SECRET_KEY and (VAR_DIR / "secret_key").exists():
    SECRET_KEY = (VAR_DIR / "secret_key").read_text().strip()
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "kvselect-insecure-development-key-do-not-use-in-production"
SECRET_KEY_MISSING = not SECRET_KEY  # Django refuses an empty key on access; kvselect.E001 explains why
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "axes",
    "selection",
    "benchmarks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.request_limits.RequestSizeLimitMiddleware",
    "config.errors.DatabaseUnavailableMiddleware",
    "config.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "selection.middleware.ChartLanguageMiddleware",
    "selection.middleware.TimezoneMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "selection.web.workspace",
            ],
        },
    },
]

DEFAULT_SQLITE_URL = f"sqlite:///{VAR_DIR / 'kvselect.sqlite3'}"
DATABASES = {"default": dj_database_url.parse(os.environ.get("DATABASE_URL", DEFAULT_SQLITE_URL), conn_max_age=0)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so that a real Celery worker process can share the test database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-kvselect.sqlite3")}
    # IMMEDIATE transactions take the write lock up front (no deadlocked read->write upgrades between
    # the web process and the worker); WAL lets readers proceed while one writer writes.
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "selection:dashboard"
LOGOUT_REDIRECT_URL = "login"

AXES_FAILURE_LIMIT = int(os.environ.get("AXES_FAILURE_LIMIT", "5"))
AXES_COOLOFF_TIME = 0.25  # hours
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no "AXES: BEGIN ..." banner on every manage.py command
AXES_LOCKOUT_PARAMETERS = ["ip_address", "username"]
# No "AXES: BEGIN ..." banner on every process start (manage.py commands included); failed logins are
# still logged with the lockout parameters (address and username).
AXES_VERBOSE = False

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve straight from the apps in development and tests
STATICFILES_DIRS = [BASE_DIR / "static"]
MEDIA_ROOT = Path(os.environ.get("KVSELECT_MEDIA_ROOT", VAR_DIR / "media"))
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "benchmarks.api.auth.UploadTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "benchmarks.api.permissions.UploadTokenScope",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "config.pagination.BoundedLimitOffsetPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "config.api_errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "kvselect API",
    "DESCRIPTION": "Choose an LLM inference engine by its KV-cache management, with evidence.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI's assets from the drf-spectacular-sidecar package, served as static files: /api/docs/
    # needs no CDN (air-gapped installs, and the Content-Security-Policy allows only 'self').
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "RunStatusEnum": "benchmarks.models.BenchmarkRun.Status",
        "SelectionStatusEnum": "selection.models.Selection.Status",
        "ResultTestEnum": "benchmarks.suite.TEST_IDS",
        "ValidationTestEnum": "benchmarks.suite.RUNNABLE_TEST_IDS",
    },
}

# --- Celery -------------------------------------------------------------------------------
# Unset CELERY_BROKER_URL = the embedded development broker: kombu's SQLAlchemy transport on
# a SQLite file, consumed by a real worker process (see README). Flagged by kvselect.W001.
EMBEDDED_BROKER_URL = f"sqla+sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or EMBEDDED_BROKER_URL
CELERY_BROKER_IS_EMBEDDED = CELERY_BROKER_URL == EMBEDDED_BROKER_URL
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
# Redis: an unacked task (its worker was killed) is delivered again after this long; longer than any
# validation run by default. The reliability tests shorten it.
KVSELECT_BROKER_VISIBILITY_TIMEOUT_S = int(os.environ.get("KVSELECT_BROKER_VISIBILITY_TIMEOUT_S", str(7 * 3600)))

# --- kvselect -----------------------------------------------------------------------------
# Hosts the validation harness may send load to (exact host names or IP addresses).
KVSELECT_ALLOWED_TARGETS = env_list("KVSELECT_ALLOWED_TARGETS", "127.0.0.1,localhost,::1")
# When the load client counts a response's bytes as received: "kernel" (the kernel's receive stamp:
# exact TTFT/ITL however busy the client) or "user" (read time in uvloop's transport: about a third
# less client CPU per token, late by the client's queue). Checked by kvselect.E002.
KVSELECT_RECEIVE_CLOCK = os.environ.get("KVSELECT_RECEIVE_CLOCK", "kernel").strip().lower()
KVSELECT_MAX_UPLOAD_BYTES = int(os.environ.get("KVSELECT_MAX_UPLOAD_BYTES", str(200 * 1024 * 1024)))
# Validation runs: a heartbeat every INTERVAL; none for STALE and the reaper (every REAPER_INTERVAL)
# stores the run's write-ahead result or fails it: a dead worker is seen within STALE + REAPER_INTERVAL.
KVSELECT_HEARTBEAT_INTERVAL_S = float(os.environ.get("KVSELECT_HEARTBEAT_INTERVAL_S", "5"))
KVSELECT_HEARTBEAT_STALE_S = float(os.environ.get("KVSELECT_HEARTBEAT_STALE_S", "30"))
KVSELECT_REAPER_INTERVAL_S = float(os.environ.get("KVSELECT_REAPER_INTERVAL_S", "15"))
# How long a worker keeps retrying to store a finished result while the database is away.
KVSELECT_STORE_RETRY_S = float(os.environ.get("KVSELECT_STORE_RETRY_S", "600"))
# A queued run whose task the broker refused is sent again after this long; one the broker took but
# no worker started (a lost message) is sent again after QUEUED_RESEND (claims make copies harmless).
KVSELECT_UNSENT_REQUEUE_S = float(os.environ.get("KVSELECT_UNSENT_REQUEUE_S", "30"))
KVSELECT_QUEUED_RESEND_S = float(os.environ.get("KVSELECT_QUEUED_RESEND_S", "900"))
KVSELECT_SYNC_PARSE_BYTES = int(os.environ.get("KVSELECT_SYNC_PARSE_BYTES", str(8 * 1024 * 1024)))
# Production traces uploaded on the page are read in the request (streamed); larger ones go through
# `manage.py import-trace` on the server.
KVSELECT_MAX_TRACE_UPLOAD_BYTES = int(os.environ.get("KVSELECT_MAX_TRACE_UPLOAD_BYTES", str(200 * 1024 * 1024)))
# OpenType font for signer names outside Latin-1 in signature stamps; unset = Noto Sans CJK SC
# extracted from Debian's fonts-noto-cjk into var/cache/fonts
KVSELECT_STAMP_FONT = os.environ.get("KVSELECT_STAMP_FONT", "")
# Signing and verification (selection/certificates/trust.py): CA certificates owners' certificates may
# chain to (PEM or DER files; the development CA under KVSELECT_DEV_CA_DIR is added when present,
# and flagged "not for procurement"), CRL files embedded in signatures for offline verification
# (PAdES B-LT), whether missing revocation data may be fetched from the CAs while signing, and an
# RFC 3161 time-stamping authority (PAdES B-T; "dev" = the in-process development TSA).
KVSELECT_TRUST_ROOTS = env_list("KVSELECT_TRUST_ROOTS")
KVSELECT_CRLS = env_list("KVSELECT_CRLS")
# The organisational seal certificates (PEM or DER files) a record's "seal" field may be signed with;
# a seal with any other certificate fails verification.
KVSELECT_SEAL_CERTIFICATES = env_list("KVSELECT_SEAL_CERTIFICATES")
KVSELECT_REVOCATION_FETCH = env_bool("KVSELECT_REVOCATION_FETCH", False)
KVSELECT_TSA_URL = os.environ.get("KVSELECT_TSA_URL", "")
KVSELECT_DEV_CA_DIR = os.environ.get("KVSELECT_DEV_CA_DIR", str(VAR_DIR / "dev-certs"))
# Server-side signing with keys an organisation holds centrally in an HSM (PKCS#11): the module,
# and per owner (username) the token and key, as JSON: {"alice": {"token": "signing", "key": "alice"}}
# ("slot" instead of "token", "module" to override the default, "cert" when the certificate object has
# another label). The PIN is typed by the owner for each signature and never stored.
KVSELECT_PKCS11_MODULE = os.environ.get("KVSELECT_PKCS11_MODULE", "")
KVSELECT_HSM_KEYS = os.environ.get("KVSELECT_HSM_KEYS", "")
# Where links in emails point (owners told a decision is due for re-evaluation).
KVSELECT_BASE_URL = os.environ.get("KVSELECT_BASE_URL", "http://127.0.0.1:8000").rstrip("/")
# Mail goes through Django's backend: the console unless EMAIL_BACKEND (and EMAIL_HOST...) say otherwise.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "kvselect <kvselect@localhost>")
DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024
# Larger uploads are spooled to disk by a handler that removes its partial file when the disk refuses
# a write (full, read-only): a 507 naming the problem, nothing left on disk or held open (config.uploads).
FILE_UPLOAD_HANDLERS = [
    "django.core.files.uploadhandler.MemoryFileUploadHandler",
    "config.uploads.SpoolingUploadHandler",
]
# Larger uploads arrive in a file here: beside MEDIA_ROOT, so storing one is a rename, not a copy.
FILE_UPLOAD_TEMP_DIR = os.environ.get("KVSELECT_UPLOAD_TEMP_DIR") or str(MEDIA_ROOT / "incoming")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
# A request body may exceed the upload limit by this much (the multipart envelope and form fields).
KVSELECT_REQUEST_OVERHEAD_BYTES = 1024 * 1024

# --- Security -----------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
if env_bool("KVSELECT_TLS", False):
    SECURE_SSL_REDIRECT = True
    SECURE_HSTS_SECONDS = 31536000
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "filters": {"expected_refusals": {"()": "config.log_filters.ExpectedRefusals"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {
        # a 403 is a refusal the page explains, not a crash: one line in the log, no traceback
        "django.request": {"filters": ["expected_refusals"]},
        "django.db.backends": {"level": "WARNING"},
        "weasyprint": {"level": "WARNING"},
        "fontTools": {"level": "WARNING"},
        "pyhanko": {"level": "WARNING"},
    },
}
