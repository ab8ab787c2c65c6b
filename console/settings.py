"""Django settings for the GPU co-location console.

Everything that differs between machines comes from environment variables (see `.env.example`).
"""

import secrets
from pathlib import Path

import plotly
from dotenv import load_dotenv

from console.broker import broker_transport_options, broker_url
from console.database import database_settings
from console.env import env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"

# The real environment wins over .env, so CI and one-off overrides behave as expected.
load_dotenv(BASE_DIR / ".env", override=False)


def _secret_key() -> str:
    configured = env_str("SECRET_KEY")
    if configured:
        return configured
    # A local run without SECRET_KEY keeps one key across restarts so sessions survive.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    return key_file.read_text().strip()


SECRET_KEY = _secret_key()
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "console",
    "inventory",
    "runbooks",
    "console.proposals",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "console.urls"
WSGI_APPLICATION = "console.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context_processors.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": database_settings(
        env_str("DATABASE_URL"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
    )
}
# Two test runs on one server need two test databases (default: test_<name>).
if env_str("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": env_str("TEST_DATABASE_NAME")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "fleet"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
# Set STATIC_ROOT (and run collectstatic) when a front server should serve the files; without
# it WhiteNoise serves them straight from the app folders.
STATIC_ROOT = env_str("STATIC_ROOT") or None
# plotly.js comes from the plotly wheel itself: the console's machines have no internet.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/plotly", Path(plotly.__file__).parent / "package_data"),
]
WHITENOISE_USE_FINDERS = True

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpu-console@localhost")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU co-location console API",
    "DESCRIPTION": "Per-card and per-process GPU memory, placements and proposals.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI from the sidecar package: the console's machines have no internet.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# Celery. Without CELERY_BROKER_URL the broker is a folder on disk: real worker and beat
# processes, no server to install.
CELERY_BROKER_URL = broker_url()
CELERY_BROKER_TRANSPORT_OPTIONS = broker_transport_options()
CELERY_BROKER_CONNECTION_TIMEOUT = 3
CELERY_TASK_ALWAYS_EAGER = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 300, minimum=1)
CELERY_TASK_SOFT_TIME_LIMIT = max(1, CELERY_TASK_TIME_LIMIT - 10)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

READYZ_BROKER_TIMEOUT_S = env_float("READYZ_BROKER_TIMEOUT_S", 2.0, minimum=0.1)

# Telemetry: how long each resolution is kept, and how the host agents sample and flush.
TELEMETRY_RAW_RETENTION_DAYS = env_int("TELEMETRY_RAW_RETENTION_DAYS", 14, minimum=1)
TELEMETRY_1M_RETENTION_DAYS = env_int("TELEMETRY_1M_RETENTION_DAYS", 90, minimum=1)
TELEMETRY_1H_RETENTION_DAYS = env_int("TELEMETRY_1H_RETENTION_DAYS", 730, minimum=1)
AGENT_SAMPLE_INTERVAL_S = env_float("AGENT_SAMPLE_INTERVAL_S", 1.0, minimum=0.05)
AGENT_FLUSH_INTERVAL_S = env_float("AGENT_FLUSH_INTERVAL_S", 10.0, minimum=1.0)
AGENT_SCRAPE_INTERVAL_S = env_float("AGENT_SCRAPE_INTERVAL_S", 5.0, minimum=0.5)
# How often beat sends each host its collection plan (deployments, engines, intervals).
COLLECTION_PLAN_INTERVAL_S = env_float("COLLECTION_PLAN_INTERVAL_S", 30.0, minimum=1.0)
# A host whose newest sample is older than this shows as stale.
COLLECTOR_STALE_AFTER_S = env_float("COLLECTOR_STALE_AFTER_S", 120.0, minimum=1.0)

# Red/amber/green: fragmentation index (1 - largest free block / free bytes in the allocator's
# pool) and card memory use (fraction of total). A card green by use but red by fragmentation
# shows red. KV reservations are sized at P95 concurrency x (1 + KV_BUFFER).
FRAGMENTATION_AMBER = env_float("FRAGMENTATION_AMBER", 0.3, minimum=0.0)
FRAGMENTATION_RED = env_float("FRAGMENTATION_RED", 0.5, minimum=0.0)
USAGE_AMBER = env_float("USAGE_AMBER", 0.80, minimum=0.0)
USAGE_RED = env_float("USAGE_RED", 0.90, minimum=0.0)
KV_BUFFER = env_float("KV_BUFFER", 0.20, minimum=0.0)

# The longest solve one API call may ask for; longer ones belong to the command line.
PLACEMENT_API_MAX_TIME_S = env_float("PLACEMENT_API_MAX_TIME_S", 30.0, minimum=0.1)

# Placement proposals. The memory gate keeps GATE_HEADROOM_BYTES free on every card beyond
# the co-tenants' P95 and the fragmentation peak. Approvers and authors hear of proposals by
# e-mail and, when PROPOSAL_WEBHOOK_URL is set, by a JSON POST; a failed delivery is retried
# PROPOSAL_NOTIFY_RETRIES times with growing waits. Links in them start with CONSOLE_BASE_URL.
GATE_HEADROOM_BYTES = env_int("GATE_HEADROOM_BYTES", 4 * 1024**3, minimum=0)
PROPOSAL_WEBHOOK_URL = env_str("PROPOSAL_WEBHOOK_URL")
PROPOSAL_WEBHOOK_TIMEOUT_S = env_float("PROPOSAL_WEBHOOK_TIMEOUT_S", 5.0, minimum=0.1)
PROPOSAL_NOTIFY_RETRIES = env_int("PROPOSAL_NOTIFY_RETRIES", 6, minimum=0)
CONSOLE_BASE_URL = env_str("CONSOLE_BASE_URL", "http://127.0.0.1:8000")

CELERY_BEAT_SCHEDULE = {
    "maintain-telemetry-partitions": {
        "task": "inventory.maintain_partitions",
        "schedule": 3600.0,
    },
    "resume-stalled-proposals": {"task": "proposals.resume_stalled", "schedule": 300.0},
    "refresh-rollups": {
        "task": "inventory.refresh_rollups",
        "schedule": env_float("ROLLUP_REFRESH_INTERVAL_S", 20.0, minimum=1.0),
        # A refresh queued while the worker was busy is useless once the next is due.
        "options": {"expires": 60},
    },
}

# Demo fleet: the logins `make run` creates and prints.
DEMO_PASSWORD = env_str("DEMO_PASSWORD", "colocate-demo")
# Days of simulated history written in the background when the demo fleet is first loaded.
DEMO_HISTORY_DAYS = env_float("DEMO_HISTORY_DAYS", 4.0, minimum=0.0)
