"""The one place the governance admin is registered: Django's autodiscovery imports this module,
which imports each package's admin (each registers its models with `@admin.register`)."""

from governance.console import admin as console_admin  # noqa: F401  (audit records, job runs)
from governance.erasure import admin as erasure_admin  # noqa: F401  (erasure requests)
from governance.export import admin as export_admin  # noqa: F401  (export requests)
from governance.retention import admin as retention_admin  # noqa: F401  (policies, legal holds, the prune)
