"""gunicorn's settings shared by `make run` (memory_project.launcher) and the tests that run the
service under gunicorn (tests/kit/servers.py): `gunicorn -c python:memory_project.gunicorn_config`.

The access log goes to standard output and names each request's route, not its path or query
(memory_project.weblog: paths hold thread ids and people's ids).

The application (Django, every module the service imports) and the local embedding model are
loaded once, by the master, before it forks the workers: they share those pages copy-on-write (one
copy of Django, torch and the model for the whole web server, not one per worker), and each worker
answers its first request with nothing left to load."""

from typing import Any

accesslog = "-"
logger_class = "memory_project.weblog.RouteAccessLogger"
# memory_project.wsgi is imported by the master (which also runs its encryption check once).
preload_app = True


def on_starting(server: Any) -> None:
    """The master, after it imported the application and before it binds and forks: import the URL
    configuration (every view module), load the local embedding model (EMBEDDER=local) and build
    screening's detectors (memoryapp.screening.recognizers.screening_warm_up: Presidio's import,
    18-60 s on a busy machine, which the first screened write of each worker paid after /readyz,
    each worker a private copy), then freeze the objects made so far (gc.freeze: a collection in
    a worker then does not write to, and so copy, the pages it shares with the master).

    Until this is done nothing listens, so /readyz is not answered. When the model's load fails,
    each worker tries again in the background and /readyz says why (post_worker_init)."""
    import gc

    from django.urls import get_resolver

    from memoryapp.screening.recognizers import screening_warm_up
    from memoryapp.search.embedders import local_model_load_before_fork, torch_kept_out

    torch_kept_out()  # before anything imports it where nothing configured uses it
    get_resolver().url_patterns  # noqa: B018  (the import is what is wanted)
    if reason := local_model_load_before_fork():
        server.log.warning("embedding model not loaded before fork: %s", reason)
    screening_warm_up()
    gc.freeze()


def pre_fork(server: Any, worker: Any) -> None:
    """No database connection the master opened while loading (the encryption check) is inherited,
    nor its connection pool: a worker sharing the master's socket would mix its queries with
    another's. Each worker opens its own pool on its first query."""
    from django.db import connections

    connections.close_all()
    # A pool the master opened (DB_POOL_SIZE) holds connections and threads a worker must not inherit.
    for connection in connections.all(initialized_only=True):
        connection.close_pool()  # type: ignore[attr-defined]


def post_worker_init(worker: object) -> None:
    """Each web worker, once Django is loaded and before it takes a request: one encode with the
    model it shares with the master (memoryapp.search.embedders.local_model_warm), so the first
    search pays nothing; where the master could not load it, the load starts in the background
    (local_model_preload) and /readyz answers 503 "embedding model loading" until it is done."""
    from memoryapp.search.embedders import local_model_preload, local_model_warm

    if not local_model_warm():
        local_model_preload()
