"""Settings, from environment variables only.

With none set, the embedded default applies: SQLite, a Celery broker on the local filesystem and
the in-process channel layer, so that a fresh machine needs no server. Production selects
PostgreSQL, Redis and friends with DATABASE_URL, CELERY_BROKER_URL and CHANNEL_LAYER_URL.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from mlmodelscope.env import (
    envbool,
    envint,
    envlist,
    envname,
    envstr,
    envurl,
    redis_database,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("MLMS_VAR_DIR", str(BASE_DIR / "var"))).resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

DEBUG = envbool("DEBUG", False)


def _secret_key() -> str:
    configured = envstr("SECRET_KEY")
    if configured:
        if len(configured) < 32:
            raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters long")
        return configured
    # Embedded default: a random key kept beside the database, so sessions survive restarts.
    # Written whole under another name and linked into place, which fails where another
    # process got there first: two processes starting at once read one key.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        draft = VAR_DIR / f".secret_key.{os.getpid()}"
        draft.write_text(secrets.token_urlsafe(48))
        draft.chmod(0o600)
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        except OSError:  # a filesystem without hard links: renamed into place instead
            os.replace(draft, path)
        finally:
            draft.unlink(missing_ok=True)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "hub",
    "evaluations",
    "traces",
    "frontend",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A NUL (or lone surrogate) in the URL's path or query is a 400 before any view runs.
    "hub.middleware.RejectMalformedUrlMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "mlmodelscope.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "mlmodelscope.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "frontend.context.invitations",
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------------
DATABASE_URL = envurl("DATABASE_URL", ("sqlite", "postgres", "postgresql", "pgsql"))
# Connections to PostgreSQL that one hub process holds at most: psycopg's pool, which a request
# borrows from and gives back when it ends. Persistent connections (CONN_MAX_AGE > 0) do not
# work under daphne: each request's sync code runs in a thread of its own, and the connection
# it left open outlived the thread until garbage collection (docs/reliability.md).
DATABASE_POOL_SIZE = envint("DATABASE_POOL_SIZE", 10, minimum=1)
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_health_checks=True)}
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # A request waits up to `timeout` seconds for a free connection, then fails (500).
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": DATABASE_POOL_SIZE,
            "timeout": 30,
        }
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "db.sqlite3"),
            "OPTIONS": {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL",
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Celery ---------------------------------------------------------------------------------
CELERY_BROKER_URL = envurl("CELERY_BROKER_URL", ("redis", "rediss", "amqp", "amqps", "filesystem"))
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if not CELERY_BROKER_URL:
    # Embedded default: kombu's filesystem transport, a broker that needs no server and that
    # every process on this machine (hub, worker, agents) shares through one folder.
    _broker_dir = VAR_DIR / "broker"
    for sub in ("queue", "processed", "control"):
        (_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_URL = "filesystem://"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "queue"),
        "data_folder_out": str(_broker_dir / "queue"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        # How often a consumer looks for new messages, in seconds.
        "polling_interval": 0.25,
    }
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# The hub only sends tasks (by name, to the agents' queues); results come back over HTTP.
CELERY_TASK_IGNORE_RESULT = True
# The broker as agents reach it, which GET /api/v1/agent/config/ tells them (the hub's own
# CELERY_BROKER_URL may name a loopback address or a local folder).
AGENT_BROKER_URL = envstr("AGENT_BROKER_URL") or CELERY_BROKER_URL
AGENT_BROKER_TRANSPORT_OPTIONS = (
    CELERY_BROKER_TRANSPORT_OPTIONS if AGENT_BROKER_URL == CELERY_BROKER_URL else {}
)
# With Redis, each host scope's agents get a Redis user that reaches only the keys of their
# scope (evaluations.broker_access). The broker is database 0: those users may not SELECT
# another, and redis-py selects none for 0.
for _name, _url in (
    ("CELERY_BROKER_URL", CELERY_BROKER_URL),
    ("AGENT_BROKER_URL", AGENT_BROKER_URL),
):
    if _url.startswith(("redis:", "rediss:")) and redis_database(_url) != 0:
        raise ImproperlyConfigured(
            f"{_name} must name Redis database 0 (redis://host:6379/0): the broker users of "
            "the agents may not SELECT another database; put the channel layer "
            "(CHANNEL_LAYER_URL) on another one instead"
        )
# The hub's part of every broker user's name and key prefix (`mlms-<namespace>-<scope>`,
# `<namespace>:<scope>:`), so that hubs sharing one Redis keep apart: 1 to 16 characters of
# a-z, 0-9 and '-'. Unset: derived from SECRET_KEY (the same in every replica of one hub).
BROKER_NAMESPACE = envname(
    "BROKER_NAMESPACE",
    r"[a-z0-9](?:[a-z0-9-]{0,14}[a-z0-9])?",
    "use 1 to 16 characters of a-z, 0-9 and '-' (not first or last)",
)
# The hub refuses to start on a Redis (broker or channel layer) that a client without a
# password may read, unless this says so (a test machine's Redis; see broker_access).
BROKER_ALLOW_OPEN_DEFAULT_USER = envbool("BROKER_ALLOW_OPEN_DEFAULT_USER", False)
# An evaluation whose host stops heartbeating is dispatched again, at most this many attempts.
EVALUATION_MAX_ATTEMPTS = envint("EVALUATION_MAX_ATTEMPTS", 3, minimum=1)
# How often the hub looks for such evaluations (seconds; 0 turns the hub's own sweep off).
EVALUATION_SWEEP_SECONDS = envint("EVALUATION_SWEEP_SECONDS", 5, minimum=0)
# A dispatch the broker has not accepted this long after its commit is sent again (seconds).
EVALUATION_SEND_SECONDS = envint("EVALUATION_SEND_SECONDS", 10, minimum=1)
# A sent dispatch not claimed this long, while a host that consumes its queue sits idle, is
# sent again: the broker lost its message (seconds).
EVALUATION_DISPATCH_SECONDS = envint("EVALUATION_DISPATCH_SECONDS", 30, minimum=1)
# A dispatched evaluation that no live host can run (its hosts stopped heartbeating, or the
# broker does not take its message) waits this long after its dispatch for one to come back
# before it fails (seconds).
EVALUATION_WAIT_SECONDS = envint("EVALUATION_WAIT_SECONDS", 600, minimum=1)

# --- Channels -------------------------------------------------------------------------------
CHANNEL_LAYER_URL = envurl("CHANNEL_LAYER_URL", ("redis", "rediss"))
if CHANNEL_LAYER_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [
                    {
                        "address": CHANNEL_LAYER_URL,
                        # Each consumer waits for its next message in a 5 s BZPOPMIN
                        # (RedisChannelLayer.brpop_timeout); redis-py's default socket timeout
                        # is 5 s too, and when it fired first the idle consumer died and its
                        # WebSocket closed with 1011 (docs/reliability.md). Reads may take
                        # longer than the BZPOPMIN; connecting may not.
                        "socket_timeout": 15,
                        "socket_connect_timeout": 5,
                    }
                ]
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- Artifact store -------------------------------------------------------------------------
ARTIFACT_ROOT = Path(envstr("ARTIFACT_ROOT", str(VAR_DIR / "artifacts"))).resolve()
ARTIFACT_ROOT.mkdir(parents=True, exist_ok=True)

# --- Limits ---------------------------------------------------------------------------------
# A manifest is a few KiB; anything much larger is a mistake or an attack.
MANIFEST_MAX_BYTES = envint("MANIFEST_MAX_BYTES", 256 * 1024, minimum=1024)
# Model files travel in multipart uploads and are streamed to disk, never held in memory.
UPLOAD_MAX_BYTES = envint("UPLOAD_MAX_BYTES", 2 * 1024**3, minimum=1024)
# The largest result an agent may post (JSON: every input's predictions, every timed batch).
RESULT_MAX_BYTES = envint("RESULT_MAX_BYTES", 256 * 1024**2, minimum=1024 * 1024)
# The most bytes of predictions pages staged for one result before it arrives (the pages an
# agent posts when a result's predictions would make its body too large).
RESULT_PAGES_MAX_BYTES = envint("RESULT_PAGES_MAX_BYTES", 8 * 1024**3, minimum=1024 * 1024)
# The layer outputs a result may keep (`capture_inputs`), uncompressed: the agent's bound on
# the layers (128 MiB, `predictors.frameworks.layer_outputs.MAX_CAPTURE_BYTES`) and the input.
LAYER_OUTPUTS_MAX_BYTES = envint("LAYER_OUTPUTS_MAX_BYTES", 192 * 1024**2, minimum=1024 * 1024)
# How long the upload check may take to load a model file in its own process
# (`predictors.frameworks.probe`): a file that takes longer is refused, naming the limit.
MODEL_CHECK_SECONDS = envint("MODEL_CHECK_SECONDS", 180, minimum=5)
# One OTLP/HTTP trace export (POST /v1/traces), after any gzip is undone.
TRACE_MAX_BYTES = envint("TRACE_MAX_BYTES", 16 * 1024**2, minimum=1024)
# Processes that store OTLP exports beside daphne's (traces.ingest_processes): one per core, up to
# four; 0 stores them in daphne's own thread (a one-core machine gains nothing from them).
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
TRACE_INGEST_PROCESSES = envint(
    "TRACE_INGEST_PROCESSES", min(_CORES, 4) if _CORES > 1 else 0, minimum=0
)
DATA_UPLOAD_MAX_MEMORY_SIZE = MANIFEST_MAX_BYTES + 64 * 1024
FILE_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024
FILE_UPLOAD_TEMP_DIR = str(VAR_DIR / "uploads")
Path(FILE_UPLOAD_TEMP_DIR).mkdir(parents=True, exist_ok=True)
# A host whose last heartbeat is older than this is not live.
HOST_LIVE_SECONDS = envint("HOST_LIVE_SECONDS", 60, minimum=5)

# --- Auth, API ------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
# Signing in without a page to go back to lands on the catalog.
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "hub.authentication.BearerTokenAuthentication",
        "hub.authentication.BrowserSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "hub.permissions.HasScope",
        "hub.permissions.KnownQueryParameters",
    ],
    "DEFAULT_PAGINATION_CLASS": "hub.api.pagination.Pagination",
    # Bodies are refused at the parsers (hub.api.parsers): JSON must be an object of bounded
    # depth, and no body may hold a NUL, a lone surrogate, an integer outside 64 bits or a
    # number that is not finite.
    "DEFAULT_PARSER_CLASSES": [
        "hub.api.parsers.JSONParser",
        "hub.api.parsers.FormParser",
        "hub.api.parsers.MultiPartParser",
    ],
    # The schema states each operation's security and error answers (hub/api/openapi.py).
    "DEFAULT_SCHEMA_CLASS": "hub.api.openapi.AutoSchema",
    # OPTIONS: what the view is, and where the schema describes its bodies (hub/api/metadata.py).
    "DEFAULT_METADATA_CLASS": "hub.api.metadata.Metadata",
    "EXCEPTION_HANDLER": "hub.api.errors.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "MLModelScope API",
    "DESCRIPTION": (
        "Evaluate, benchmark and profile machine-learning models across frameworks and "
        "hardware. Authenticate with `Authorization: Bearer <token>`."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # POST /v1/traces, the OTLP/HTTP receiver, is a plain Django view: the hook adds it.
    # One name per choice set that several serializers share.
    "ENUM_NAME_OVERRIDES": {
        "EvaluationStatusEnum": "evaluations.models.Evaluation.STATUSES",
        "FrameworkEnum": ["pytorch", "tensorflow", "onnxruntime"],
        "DeviceEnum": "predictors.protocol.DEVICES",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "hub.api.openapi.add_otlp_receiver",
    ],
}

# --- Static files, i18n ---------------------------------------------------------------------
STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # The charting library, from the plotly wheel (`frontend.staticfinders`).
    "frontend.staticfinders.VendorFinder",
]
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
}
