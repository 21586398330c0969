"""gunicorn's settings shared by `make run` (memory_project.launcher) and the tests that run the
service under gunicorn (tests/kit/servers.py): `gunicorn -c python:memory_project.gunicorn_config`.

The access log goes to standard output and names each request's route, not its path or query
(memory_project.weblog: paths hold thread ids and people's ids)."""

accesslog = "-"
logger_class = "memory_project.weblog.RouteAccessLogger"
