"""gunicorn's settings shared by `make run` (memory_project.launcher) and the tests that run the
service under gunicorn (tests/kit/servers.py): `gunicorn -c python:memory_project.gunicorn_config`.

The access log goes to standard output and names each request's route, not its path or query
(memory_project.weblog: paths hold thread ids and people's ids)."""

accesslog = "-"
logger_class = "memory_project.weblog.RouteAccessLogger"


def post_worker_init(worker: object) -> None:
    """Each web worker, once Django is loaded, starts loading the local embedding model in the
    background (memoryapp.search.embedders.local_model_preload); /readyz answers 503 "embedding model
    loading" until it is in memory, so the first search after readyz does not pay the load."""
    from memoryapp.search.embedders import local_model_preload

    local_model_preload()
