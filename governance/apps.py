from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate


class GovernanceConfig(AppConfig):
    name = "governance"
    verbose_name = "Governance"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Imported once the app registry is ready (jobs and roles import models).
        from governance.crypto.checks import encryption_keys_check
        from governance.jobs.schedules import schedules_sync
        from governance.staff.roles import roles_sync

        # After every app's permissions exist: governance is the last installed app.
        post_migrate.connect(roles_sync, sender=self, dispatch_uid="governance.roles_sync")
        # Beat schedules are declared in governance.jobs.schedules.SCHEDULES and kept in the database.
        post_migrate.connect(schedules_sync, sender=self, dispatch_uid="governance.schedules_sync")
        # A database written with keys refuses a process started without them (or with wrong ones).
        checks.register(encryption_keys_check, checks.Tags.database)
