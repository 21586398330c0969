"""The service's database backend: Django's PostgreSQL one, with a health check that costs no round trip (base.py)."""
