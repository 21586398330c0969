import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memory_project.settings")
application = get_wsgi_application()

# Refuse to serve a database written with encryption keys this process lacks (or has wrong).
from governance.crypto.startup import encryption_startup_check  # noqa: E402  (after setup)

encryption_startup_check()
