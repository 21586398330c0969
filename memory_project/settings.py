"""The one settings module, read from environment variables (every variable: docs/operations.md, Configuration)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from memory_project import embedded
from memory_project.env import env_bool, env_choice, env_float, env_int, env_list, env_named, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and env_bool("REQUIRE_SECRET_KEY", False):
        raise ImproperlyConfigured("SECRET_KEY must be set")
    # A development key kept in var/ so sessions survive restarts; production sets SECRET_KEY.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        VAR_DIR.mkdir(parents=True, exist_ok=True)
        key_file.write_text(secrets.token_urlsafe(50))
        key_file.chmod(0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, pinned and served by us (the docs work offline)
    "django_filters",
    "django_celery_beat",
    "memoryapp",
    "governance",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # An agent request's key is checked before its body is read; without a valid one, it never is.
    "memoryapp.api.middleware.KeyBeforeBodyMiddleware",
    # Every body must arrive within REQUEST_BODY_SECONDS (a read past it: 408, the connection closed).
    "memoryapp.api.middleware.BodyDeadlineMiddleware",
    # Before anything reads a body: a chunked one is read whole here (or refused).
    "memoryapp.api.middleware.ChunkedBodyMiddleware",
    "memoryapp.api.middleware.RefuseNulInUrlMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Django's session, CSRF, user and messages middlewares, which agent requests go past (they
    # have none of these; memoryapp.api.middleware._BrowserPagesOnly).
    "memoryapp.api.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "memoryapp.api.middleware.CsrfViewMiddleware",
    "memoryapp.api.middleware.AuthenticationMiddleware",
    "memoryapp.api.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # The route the request matched, left for gunicorn's access log (memory_project.weblog).
    "memory_project.weblog.RouteForAccessLogMiddleware",
    # Last, so its process_exception sees a view's error first: a database away is a 503, not a 500.
    "memoryapp.api.middleware.DatabaseOutageMiddleware",
]

ROOT_URLCONF = "memory_project.urls"
WSGI_APPLICATION = "memory_project.wsgi.application"
ASGI_APPLICATION = "memory_project.asgi.application"

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
            ],
        },
    },
]

# --- Database: PostgreSQL with pgvector, always ---------------------------------------------

DATABASE_URL = env_url("DATABASE_URL", ("postgres", "postgresql"))
EMBEDDED_PGDATA = Path(env_str("EMBEDDED_PGDATA", str(VAR_DIR / "pgdata")))
USES_EMBEDDED_POSTGRES = not DATABASE_URL
if USES_EMBEDDED_POSTGRES:
    DATABASE_URL = embedded.postgres_url(EMBEDDED_PGDATA, database="memory")


# Django's psycopg connection pool (psycopg-pool) in each process: DB_POOL_SIZE connections
# (0: none; each thread keeps a connection of its own for DB_CONN_MAX_AGE seconds instead). A
# request takes one from the pool (checked with an empty query, so a restarted database costs no
# failed request) and gives it back when it ends; one waiting longer than DB_POOL_TIMEOUT seconds
# for a free one fails (a 503 from DatabaseOutageMiddleware). `make run` gives it to the web server
# only: a Celery worker keeps one session of its own (its job runs' advisory locks, docs/operations.md).
DB_POOL_SIZE = env_int("DB_POOL_SIZE", 0, minimum=0, maximum=100)
DB_POOL_TIMEOUT = env_float("DB_POOL_TIMEOUT", 10.0, minimum=0.1, maximum=600)


# What DATABASE_URL's query string may hold: libpq's connection parameters (`sslmode`,
# `connect_timeout`, `options`, `target_session_attrs`...: those of the libpq psycopg runs on),
# passed on as they are, and Django's `assume_role` (a role name). Anything else is refused here, at
# start, naming it. Before, a name libpq does not know stopped the service only at its first
# connection (`invalid connection option`), and Django's typed options were read wrong without a
# word: `server_side_binding=true` was the string "true", which Django (asking `is True`) took for
# off. The service cannot run with server-side binding anyway: several of its queries are more
# than one statement in one string (`SET LOCAL ...; SELECT ...`), which a prepared statement
# refuses; `server_side_binding=false` is what it does. Its transactions are written for READ
# COMMITTED (each connection is set to it: `database_from_url`), and its pool is DB_POOL_SIZE.
_DJANGO_OPTIONS = {"assume_role"}
_REFUSED_OPTIONS = {
    "isolation_level": "the service's transactions are written for READ COMMITTED, which every connection uses",
    "pool": "set DB_POOL_SIZE (and DB_POOL_TIMEOUT) instead",
}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _database_options(query: str) -> dict[str, object]:
    """DATABASE_URL's query string as Django's OPTIONS, each checked (see `_DJANGO_OPTIONS`)."""
    from psycopg import pq

    libpq = {d.keyword.decode() for d in pq.Conninfo.get_defaults()}
    options: dict[str, object] = {}
    for name, values in parse_qs(query).items():
        if len(values) > 1:
            raise ImproperlyConfigured(f"DATABASE_URL gives {name} {len(values)} times; give it once.")
        value = values[0]
        if name in _REFUSED_OPTIONS:
            raise ImproperlyConfigured(f"DATABASE_URL's {name} is not supported: {_REFUSED_OPTIONS[name]}.")
        if name == "server_side_binding":
            if value.lower() in _TRUE:
                raise ImproperlyConfigured(
                    "DATABASE_URL's server_side_binding=true is not supported: some of the service's queries are "
                    "several statements in one string, which server-side binding refuses. Leave it out."
                )
            if value.lower() not in _FALSE:
                raise ImproperlyConfigured(f"DATABASE_URL's server_side_binding must be false, not {value!r}.")
        elif name in libpq or name in _DJANGO_OPTIONS:
            options[name] = value
        else:
            raise ImproperlyConfigured(
                f"DATABASE_URL's {name} is neither a libpq connection parameter nor an option this service "
                f"reads ({', '.join(sorted(_DJANGO_OPTIONS))})."
            )
    return options


def database_from_url(
    url: str, *, pool_size: int = DB_POOL_SIZE, pool_timeout: float = DB_POOL_TIMEOUT
) -> dict[str, object]:
    parts = urlsplit(url)
    query = _database_options(parts.query)
    host = str(query.pop("host", None) or parts.hostname or "")
    if pool_size:
        query["pool"] = {"min_size": pool_size, "max_size": pool_size, "timeout": pool_timeout}
    # READ COMMITTED set on each connection, whatever the server's or the database's
    # `default_transaction_isolation` says: without it Django leaves the server's default, and under
    # REPEATABLE READ an audit append racing another read a stale end of the chain (governance.audit.chain).
    from psycopg import IsolationLevel

    query["isolation_level"] = IsolationLevel.READ_COMMITTED
    return {
        "ENGINE": "memory_project.postgres",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        # A pooled connection goes back to the pool at the end of each request (Django refuses both).
        "CONN_MAX_AGE": 0 if pool_size else env_int("DB_CONN_MAX_AGE", 60, minimum=0),
        "CONN_HEALTH_CHECKS": True,
        "OPTIONS": query,
        "TEST": {"NAME": "test_memory"},
    }


DATABASES = {"default": database_from_url(DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis and Celery -------------------------------------------------------------------------

REDIS_URL = env_url("REDIS_URL", ("redis", "rediss", "unix"))
if not REDIS_URL:
    REDIS_URL = embedded.redis_url(VAR_DIR)

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a crashed worker's job is delivered again
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 1800, minimum=10)
CELERY_TASK_SOFT_TIME_LIMIT = CELERY_TASK_TIME_LIMIT - 5
# Seconds a publish waits on a broker that does not answer (to connect, then for each reply): a
# write whose job the broker cannot take answers as usual and its run is sent later (governance.jobs).
BROKER_TIMEOUT = env_float("BROKER_TIMEOUT", 3.0, minimum=0.1, maximum=60)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": CELERY_TASK_TIME_LIMIT + 60,
    "socket_connect_timeout": BROKER_TIMEOUT,
    "socket_timeout": BROKER_TIMEOUT,
}
CELERY_BROKER_CONNECTION_TIMEOUT = BROKER_TIMEOUT
# After a send (or a debounce mark) fails, a process stops asking the broker for this many seconds:
# its writes answer at once and leave their runs to the job sweep (governance.jobs; 0: always ask).
BROKER_BREAKER_SECONDS = env_float("BROKER_BREAKER_SECONDS", 30.0, minimum=0, maximum=3600)
# One more try, at once: a publish never holds a request for long (the job sweep sends it later).
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
# A worker (and beat) waits out a broker outage instead of exiting.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# The job sweep (governance.tasks.jobs_sweep, every minute): a queued run the broker never took is
# sent once it is this old; one taken this long ago (after its countdown) and still not started is
# looked at: sent again when the broker lost it, else at most JOB_RESEND_MAX times, with backoff.
JOB_UNSENT_GRACE_SECONDS = env_int("JOB_UNSENT_GRACE_SECONDS", 30, minimum=0)
JOB_RESEND_AFTER_SECONDS = env_int("JOB_RESEND_AFTER_SECONDS", 600, minimum=60)
# How often the sweep sends a run again while the broker still holds its data (then it only says
# the run waits); the waits between looks double from JOB_RESEND_AFTER_SECONDS.
JOB_RESEND_MAX = env_int("JOB_RESEND_MAX", 3, minimum=0, maximum=100)
# One queue per kind of work, so a slow model never delays an erasure: each task names its queue
# where it is declared (governance.jobs: `@job(queue=...)`, `@tick(queue=...)`).
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_WORKER_QUEUES = env_list("CELERY_QUEUES", ["default", "embedding", "extraction", "consolidation", "governance"])
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
# The retention prune (governance.retention): rows, or threads, per batch; each batch is one
# transaction, holding the locks of the threads it changes until it commits.
PRUNE_BATCH = env_int("PRUNE_BATCH", 200, minimum=1, maximum=100_000)
# A pause after each batch of a real prune, in seconds (0: none): room for writers on a busy database.
PRUNE_PAUSE_SECONDS = env_float("PRUNE_PAUSE_SECONDS", 0.0, minimum=0.0, maximum=60.0)
CELERY_TIMEZONE = "UTC"

# --- Providers ---------------------------------------------------------------------------------

EMBEDDER = env_choice("EMBEDDER", "local", ("local", "openai", "gemini", "fake"))
# Each remote provider's usual model and endpoint, unless the variables say otherwise.
_EMBEDDER_DEFAULTS = {
    "openai": ("text-embedding-3-small", "https://api.openai.com/v1"),
    "gemini": ("gemini-embedding-001", "https://generativelanguage.googleapis.com/v1beta"),
}
# The models EMBEDDER=local has in its packages (memoryapp.search.embedders.LOCAL_MODELS): their
# weights are installed with requirements.txt and never downloaded. The first is the default
# (issue 26: all-MiniLM-L6-v2 in int8 arithmetic, ~3x the turns per CPU second of the torch one,
# which EMBEDDING_MODEL=all-MiniLM-L6-v2 keeps).
LOCAL_EMBEDDING_MODELS = (
    "all-MiniLM-L6-v2-q8",
    "all-MiniLM-L6-v2",
    "all-MiniLM-L6-v2-int8",
    "multilingual-e5-small-q4",
)
EMBEDDING_MODEL = env_str("EMBEDDING_MODEL", _EMBEDDER_DEFAULTS.get(EMBEDDER, (LOCAL_EMBEDDING_MODELS[0], ""))[0])
if EMBEDDER == "local":
    EMBEDDING_MODEL = env_named("EMBEDDING_MODEL", EMBEDDING_MODEL, LOCAL_EMBEDDING_MODELS, when="EMBEDDER=local")
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384, minimum=1, maximum=16000)
EMBEDDING_URL = (
    env_url("EMBEDDING_URL", ("http", "https")) or _EMBEDDER_DEFAULTS.get(EMBEDDER, _EMBEDDER_DEFAULTS["openai"])[1]
)
EMBEDDING_API_KEY = env_str("EMBEDDING_API_KEY", "")
EMBEDDING_TIMEOUT = env_float("EMBEDDING_TIMEOUT", 30.0, minimum=0.1)
# Texts per embedding call (and rows per batch of the embedding job). The local model sorts a call's
# texts by length and encodes them 64 at a time: batches of 64 rows padded each group to its longest
# text, 74% of the model's own rate per CPU second; 256: 90% (bench/embedding_job.py, issue 26).
EMBEDDING_BATCH_SIZE = env_int("EMBEDDING_BATCH_SIZE", 256, minimum=1, maximum=2048)
# CPU threads of the local model in each process (0: torch's default, one per core). One each keeps
# two worker processes and the web from oversubscribing a small machine.
EMBEDDING_THREADS = env_int("EMBEDDING_THREADS", 1, minimum=0, maximum=256)
# The embedding job of an agent runs this many seconds after the write that sent it; the writes of
# those seconds join it (memoryapp.search.indexing.embedding_schedule). A run has a fixed cost
# (~14 ms of the worker's CPU, its message and job run rows: docs/operations.md), so a longer wait
# embeds more turns a run for that cost, and a new turn is found by vector that much later.
EMBEDDING_DEBOUNCE_SECONDS = env_float("EMBEDDING_DEBOUNCE_SECONDS", 1.0, minimum=0.0, maximum=3600.0)

# The search's reranker port (memoryapp.search.rerank): none, an HTTP rerank endpoint (Cohere, Jina,
# Hugging Face TEI and vLLM answer this shape), or a local cross-encoder whose weights are at a
# local path (never downloaded at run time).
RERANKER = env_choice("RERANKER", "none", ("none", "http", "local"))
RERANKER_URL = env_url("RERANKER_URL", ("http", "https"))
RERANKER_MODEL = env_str("RERANKER_MODEL", "")
RERANKER_API_KEY = env_str("RERANKER_API_KEY", "")
RERANKER_TIMEOUT = env_float("RERANKER_TIMEOUT", 5.0, minimum=0.1)
RERANKER_TOP = env_int("RERANKER_TOP", 30, minimum=1, maximum=200)
# The search's graph channels (memoryapp.search.graph_channels: entity items, the PPR walk, evidence
# turns). Off by default: on LoCoMo they gave no R@10 and cost ~2.5x a search's time (issue 26).
SEARCH_GRAPH_CHANNELS = env_bool("SEARCH_GRAPH_CHANNELS", False)
# The speaker turn channel (memoryapp.search.turn_entities.speaker_turns): on by default (false turns
# it off), see docs/recall-and-context.md for what it lifts and lowers on LoCoMo.
SEARCH_SPEAKER_CHANNEL = env_bool("SEARCH_SPEAKER_CHANNEL", True)

LLM_PROVIDER = env_choice("LLM_PROVIDER", "none", ("none", "openai", "anthropic", "scripted"))
LLM_BASE_URL = env_url("LLM_BASE_URL", ("http", "https"))
LLM_MODEL = env_str("LLM_MODEL", "")
LLM_API_KEY = env_str("LLM_API_KEY", "")
LLM_TIMEOUT = env_float("LLM_TIMEOUT", 120.0, minimum=0.1)
LLM_MAX_RETRIES = env_int("LLM_MAX_RETRIES", 3, minimum=0, maximum=10)
# Prices per million tokens, so job runs show what they cost (0: not priced).
LLM_PRICE_INPUT_PER_MTOK = env_float("LLM_PRICE_INPUT_PER_MTOK", 0.0, minimum=0.0)
LLM_PRICE_OUTPUT_PER_MTOK = env_float("LLM_PRICE_OUTPUT_PER_MTOK", 0.0, minimum=0.0)
# Entries arriving within this many seconds of the first join one extraction run.
EXTRACTION_DEBOUNCE_SECONDS = env_float("EXTRACTION_DEBOUNCE_SECONDS", 30.0, minimum=0.0, maximum=86400.0)
# Automatic compaction (memoryapp.compaction.auto): a thread passing its trigger is compacted this
# many seconds after the append that crossed it, so a burst of appends gives one job.
AUTO_COMPACTION_DEBOUNCE_SECONDS = env_float("AUTO_COMPACTION_DEBOUNCE_SECONDS", 5.0, minimum=0.0, maximum=3600.0)
# How long a process keeps an agent's automatic compaction settings for the check after appends
# (no query per append); a change reaches the other processes within this time.
AUTO_COMPACTION_SETTINGS_TTL_SECONDS = env_float(
    "AUTO_COMPACTION_SETTINGS_TTL_SECONDS", 10.0, minimum=0.0, maximum=3600.0
)
# Consolidation between runs (memoryapp.consolidation): the caps of one scheduled pass. A pass that
# reaches a cap stops where it is and the next run goes on from there.
CONSOLIDATION_MAX_SCOPES = env_int("CONSOLIDATION_MAX_SCOPES", 20, minimum=1, maximum=10_000)
CONSOLIDATION_MAX_CHANGES = env_int("CONSOLIDATION_MAX_CHANGES", 10, minimum=1, maximum=10_000)
CONSOLIDATION_MAX_SUBJECTS = env_int("CONSOLIDATION_MAX_SUBJECTS", 10, minimum=1, maximum=1_000)
OBSERVATIONS_MAX_ENTITIES = env_int("OBSERVATIONS_MAX_ENTITIES", 3, minimum=1, maximum=1_000)
OBSERVATIONS_MIN_ITEMS = env_int("OBSERVATIONS_MIN_ITEMS", 3, minimum=1, maximum=1_000)

# --- Change events (memoryapp.events): SSE streams and webhooks ----------------------------------

# A stream (GET /api/v1/events) holds one web thread and one database connection while it is open:
# it is closed after this many seconds with a `retry:` hint, and the client resumes with
# Last-Event-ID. It looks for new events every EVENTS_POLL_SECONDS (one indexed query).
EVENTS_STREAM_SECONDS = env_float("EVENTS_STREAM_SECONDS", 30.0, minimum=0.0, maximum=3600.0)
EVENTS_POLL_SECONDS = env_float("EVENTS_POLL_SECONDS", 0.5, minimum=0.05, maximum=60.0)
# Streams one web process serves at once (the rest answer 503 with Retry-After): keep it below
# WEB_THREADS, so streams never take every thread the API needs.
EVENTS_MAX_STREAMS = env_int("EVENTS_MAX_STREAMS", 2, minimum=1, maximum=10_000)
# Of those, the streams one agent holds at once (all its keys together; more answer 429), so one agent
# cannot take every slot and starve the others: half of EVENTS_MAX_STREAMS (rounded up) by default.
EVENTS_MAX_STREAMS_PER_AGENT = env_int(
    "EVENTS_MAX_STREAMS_PER_AGENT", (EVENTS_MAX_STREAMS + 1) // 2, minimum=1, maximum=10_000
)
# A run's event ledger (memoryapp.ledger): its deltas, tool events and snapshot events are kept for the
# newest this many events of the run (older ones are deleted as new ones come); `settled` and
# `faulted`, and the latest snapshot, are kept as long as the run. Its streams share the slots above.
RUN_EVENTS_WINDOW = env_int("RUN_EVENTS_WINDOW", 1000, minimum=1, maximum=1_000_000)
# Seconds a webhook delivery waits for the receiver's answer.
WEBHOOK_TIMEOUT = env_float("WEBHOOK_TIMEOUT", 10.0, minimum=0.1, maximum=300.0)
# Webhook URLs must reach a public address: one naming localhost, a loopback, private, link-local
# (cloud metadata), shared or reserved address is refused when set and, resolved again, at each
# delivery, so an admin page cannot make the service probe its own network. Only for a receiver
# on the service's own network (and the tests): set it to 1.
WEBHOOK_ALLOW_PRIVATE_URLS = env_bool("WEBHOOK_ALLOW_PRIVATE_URLS", False)

# --- Access log (memoryapp.search.access_log) ------------------------------------------------------

# Days an access log row is kept (a daily job deletes older ones); 0 keeps them until their thread
# or their person is deleted.
ACCESS_LOG_RETENTION_DAYS = env_int("ACCESS_LOG_RETENTION_DAYS", 365, minimum=0, maximum=36_500)

# --- Audit ---------------------------------------------------------------------------------------

# After each commit the audit chain's head is appended here, outside the database, so a chain cut
# short or re-hashed from some record on no longer verifies (governance.audit). It belongs to its
# database: keep it (and back it up) with the database, on storage every web and worker process
# of the deployment writes to.
AUDIT_ANCHOR_FILE = Path(env_str("AUDIT_ANCHOR_FILE", str(VAR_DIR / "audit-anchors.log")))
# Each line is written at once, after its commit, and made durable (fsync) within this many seconds,
# one fsync for every line of that interval (governance.audit.anchor_file): what the machine going
# down may lose. 0: an fsync after every line, on the committing request's thread.
AUDIT_ANCHOR_SYNC_SECONDS = env_float("AUDIT_ANCHOR_SYNC_SECONDS", 1.0, minimum=0, maximum=60)

# --- Signed receipts ------------------------------------------------------------------------------

# The Ed25519 key that signs receipts (governance.receipts): a PEM private key or its 32-byte seed
# as 64 hex digits, inline or in a file; without either, one is generated into
# $VAR_DIR/receipt-signing-key.pem (0600) on first use. Every web and worker process must see the
# same key, and it must outlive the database's backups: receipts are checked against it for years.
RECEIPT_SIGNING_KEY = env_str("RECEIPT_SIGNING_KEY", "")
RECEIPT_SIGNING_KEY_FILE = env_str("RECEIPT_SIGNING_KEY_FILE", "")

# --- Export requests ----------------------------------------------------------------------------

# Where export jobs write the archives of a person's data (governance.export): web processes serve
# them from here, so in a deployment of several hosts it is storage every worker and web process
# shares. The archives hold personal data: keep the directory private.
EXPORT_DIR = Path(env_str("EXPORT_DIR", str(VAR_DIR / "exports")))
# --- Encryption at rest ------------------------------------------------------------------------

# "k2:<64 hex>,k1:<64 hex>": master keys, the first wraps new data keys, the others only unwrap
# older ones until `manage.py encryption_rotate` has rewrapped them (governance.crypto). Empty:
# encryption is off. From a file (a mounted secret) with MEMORY_ENCRYPTION_KEYS_FILE.
MEMORY_ENCRYPTION_KEYS_FILE = env_str("MEMORY_ENCRYPTION_KEYS_FILE", "")
MEMORY_ENCRYPTION_KEYS = env_str("MEMORY_ENCRYPTION_KEYS", "")
if MEMORY_ENCRYPTION_KEYS_FILE and not MEMORY_ENCRYPTION_KEYS:
    try:
        MEMORY_ENCRYPTION_KEYS = Path(MEMORY_ENCRYPTION_KEYS_FILE).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(
            f"MEMORY_ENCRYPTION_KEYS_FILE: cannot read {MEMORY_ENCRYPTION_KEYS_FILE}: {exc}"
        ) from exc
# The wrapped data keys (one small file each), kept out of the database so its dumps and backups
# hold no key material: crypto-shredding a person removes their file. Shared by every process of
# a deployment (a volume); back it up apart from the database, and keep those backups short-lived.
MEMORY_KEYSTORE_DIR = Path(env_str("MEMORY_KEYSTORE_DIR", str(VAR_DIR / "keystore")))

# --- Admin sign-ins (memoryapp.admin.login_guard) --------------------------------------------

# Failed sign-ins one username, and one client address, may make before they are locked out for the
# rest of ADMIN_LOGIN_LOCKOUT_SECONDS (counted from the first failure; 0: no lockout of that kind).
ADMIN_LOGIN_FAILURES = env_int("ADMIN_LOGIN_FAILURES", 5, minimum=0, maximum=1_000_000)
ADMIN_LOGIN_ADDRESS_FAILURES = env_int("ADMIN_LOGIN_ADDRESS_FAILURES", 20, minimum=0, maximum=1_000_000)
ADMIN_LOGIN_LOCKOUT_SECONDS = env_int("ADMIN_LOGIN_LOCKOUT_SECONDS", 900, minimum=1, maximum=86_400)
AUTHENTICATION_BACKENDS = ["memoryapp.admin.login_guard.LockoutModelBackend"]

# --- Admin account created on first start -------------------------------------------------

ADMIN_USERNAME = env_str("ADMIN_USERNAME", "admin")
ADMIN_PASSWORD = env_str("ADMIN_PASSWORD", "")
ADMIN_EMAIL = env_str("ADMIN_EMAIL", "admin@localhost")

# --- API -----------------------------------------------------------------------------------------

API_PAGE_SIZE = env_int("API_PAGE_SIZE", 100, minimum=1, maximum=1000)
# Abuse limits per agent key, counted in Redis (memoryapp.agents.limits); an agent's own values (its
# admin page) override them. A token bucket: API_RATE_BURST requests at once, refilled at
# API_RATE_PER_MINUTE a minute (0: no rate limit); past it, 429 with Retry-After.
API_RATE_PER_MINUTE = env_int("API_RATE_PER_MINUTE", 6000, minimum=0, maximum=1_000_000)
API_RATE_BURST = env_int("API_RATE_BURST", 1000, minimum=1, maximum=1_000_000)
# Context builds and searches one key runs at once (0: no cap); past it, 429 with Retry-After. A slot
# a killed process never gave back stops counting after API_HEAVY_SLOT_SECONDS.
API_HEAVY_CONCURRENCY = env_int("API_HEAVY_CONCURRENCY", 4, minimum=0, maximum=10_000)
API_HEAVY_SLOT_SECONDS = env_int("API_HEAVY_SLOT_SECONDS", 300, minimum=1, maximum=86_400)
# Seconds a request's body may take to arrive after its headers (under gunicorn, whose threads would
# otherwise wait on a slow client for ever); past it, 408 `request_timeout` and the connection closes.
# 32 MiB (the largest API body) at 1 MiB/s takes 32 s. 0: no limit.
REQUEST_BODY_SECONDS = env_float("REQUEST_BODY_SECONDS", 60.0, minimum=0.0, maximum=3600.0)
# Failed authentications (no such key, a revoked one, a wrong secret, a malformed header) one client
# address, or one key prefix, may make in a minute; past it, every request of that address, or with a
# key of that prefix, answers 429 with Retry-After until the minute of its first failure is over
# (0: no limit).
API_AUTH_FAILURES_PER_MINUTE = env_int("API_AUTH_FAILURES_PER_MINUTE", 30, minimum=0, maximum=1_000_000)
# Seconds a web process keeps a key's lookup (key and agent) before reading it again; every change of an
# agent or key invalidates it at once in every process (memoryapp.agents.keycache). 0: look up always.
API_KEY_CACHE_SECONDS = env_int("API_KEY_CACHE_SECONDS", 10, minimum=0, maximum=3600)
# Seconds the limits wait for Redis; Redis away, they fail open (the request is served, a warning logged).
API_LIMITS_REDIS_TIMEOUT = env_float("API_LIMITS_REDIS_TIMEOUT", 0.25, minimum=0.01, maximum=10.0)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["memoryapp.api.auth.AgentKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["memoryapp.api.auth.IsAgent"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["memoryapp.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "memoryapp.api.schema.AgentApiSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "memoryapp.api.errors.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["memoryapp.api.limits.KeyRateThrottle"],
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Memory governance service",
    "DESCRIPTION": "Long-term memory for AI agents: threads as trees, memory items, memory files, recall.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_AUTHENTICATION": [],
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    # The docs page loads Swagger UI from drf-spectacular-sidecar's static files, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Swagger UI would otherwise send the schema's URL to its public validator for a badge.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    # Fields of the same name with different choices (a `status` of an item, of a quote, of a job)
    # get an enum each, named here rather than by a hash.
    "ENUM_NAME_OVERRIDES": {
        "ItemKindEnum": "memoryapp.models.choices.ItemKind",
        "ItemStatusEnum": "memoryapp.models.choices.ItemStatus",
        "EvidenceStatusEnum": "memoryapp.models.choices.EvidenceStatus",
        "JobStatusEnum": "governance.models.JobRun.Status",
        "HitKindEnum": "memoryapp.api.search.HIT_KINDS",
        "PathKindEnum": "memoryapp.api.files.PATH_KINDS",
        "CompactionStrategyEnum": "memoryapp.compaction.plan.STRATEGY_NAMES",
        "ContextStrategyEnum": "memoryapp.context.builder.STRATEGIES",
        "OnBusyEnum": "memoryapp.models.choices.OnBusy",
        "RunStatusEnum": "memoryapp.models.runs.ThreadRun.Status",
        "AutoCompactionStrategyEnum": "memoryapp.models.choices.AutoCompactionStrategy",
        "ScreeningActionEnum": "memoryapp.screening.policy.ACTIONS",
        "FactSearchModeEnum": "memoryapp.items.facts.SEARCH_MODES",
        "ModeEnum": "memoryapp.forgetting.person.MODES",
        "RunEventKindEnum": "memoryapp.ledger.services.KINDS",
        "ChannelSessionStatusEnum": "memoryapp.models.sessions.ChannelSession.Status",
    },
}

# --- Static files, i18n, logging ------------------------------------------------------------

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # whitenoise serves from here after collectstatic
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
}
WHITENOISE_USE_FINDERS = True

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOG_LEVEL = env_choice("LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # Django's request warnings ("Not Found: <path>", django.request and django.security.*) name the
    # route, not the path (memory_project.weblog).
    "filters": {"route_only": {"()": "memory_project.weblog.RouteOnly"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["route_only"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # The MCP SDK says at INFO that it starts and stops a transport: each request of /mcp/ does.
    # Presidio (memoryapp.screening) names each recogniser it loads, at INFO, once per process.
    "loggers": {
        "embedded_postgres": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
        "presidio-analyzer": {"level": "WARNING"},
    },
}
