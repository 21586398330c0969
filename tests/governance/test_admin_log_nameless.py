"""Django's admin log says what staff did to which row by kind and number, never the row's text
(governance.staff.adminlog): an entry written before a person's erasure must not name them after it."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.db import connection

from governance.staff.adminlog import NamelessAdminLog
from memoryapp.models import Agent, LegalHold
from tests.kit.admin import staff_client
from tests.kit.factories import AgentFactory

PERSON = "p-ines-4k"
HOLDS = "/admin/memoryapp/legalhold/"


def admin_log_text() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT object_id, object_repr, change_message FROM django_admin_log ORDER BY id")
        return "\n".join(" | ".join(row) for row in cursor.fetchall())


def test_every_admin_of_the_service_logs_without_names() -> None:
    ours = [
        type(model_admin).__name__
        for model, model_admin in admin.site._registry.items()
        if model._meta.app_label in {"memoryapp", "governance"} and not isinstance(model_admin, NamelessAdminLog)
    ]
    assert ours == []


@pytest.mark.django_db
def test_holds_placed_on_a_person_and_their_thread_leave_no_id_in_the_admin_log() -> None:
    alice: Agent = AgentFactory(slug="alice")
    officer = staff_client(username="olga", groups=("Privacy officers",))

    on_person = officer.post(f"{HOLDS}add/", {"agent": alice.pk, "user_id": PERSON, "reason": "audit"})
    on_thread = officer.post(
        f"{HOLDS}add/", {"agent": alice.pk, "thread_external_id": f"trip:{PERSON}", "reason": "audit"}
    )

    assert (on_person.status_code, on_thread.status_code) == (302, 302)
    holds = list(LegalHold.objects.order_by("pk").values_list("pk", flat=True))
    logged = admin_log_text()
    assert logged.count("legal hold #") == 2 and all(f"legal hold #{pk}" in logged for pk in holds)
    assert PERSON not in logged
