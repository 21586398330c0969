"""The erasure requests' admin: privacy officers file, follow, run again and read reports; reviewers
and operators can neither see nor file them. "Erase this person" from a thread's and an item's page."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import AuditRecord, ErasureRequest, JobRun
from governance.receipts import receipt_verify
from memoryapp.models import LegalHold, MemoryFileVersion, MemoryItem, Thread
from tests.kit.admin import staff_client
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import AgentFactory, EntryFactory, MemoryItemFactory, ThreadFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def signing_key_of_this_test(tmp_path: Path, settings: Any) -> None:
    """Reports are signed with a key generated under this test's own VAR_DIR."""
    settings.VAR_DIR = tmp_path / "var"
    settings.RECEIPT_SIGNING_KEY = ""
    settings.RECEIPT_SIGNING_KEY_FILE = ""


LIST = "/admin/governance/erasurerequest/"
ADD = LIST + "add/"


def _officer(name: str = "pat") -> Client:
    return staff_client(username=name, groups=("Privacy officers",))


def _ana() -> tuple[Any, Thread]:
    agent = AgentFactory(slug="alice")
    thread = ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana")
    EntryFactory(thread=thread, role="user", content="I moved to Porto with my sister Lucinda last spring.")
    return agent, thread


def _post_request(client: Client, **fields: Any) -> Any:
    """The form as confirmed (the first POST, without `confirmed`, shows what would go)."""
    body = {
        "user_id": "u-ana",
        "identifiers": "",
        "mode": "erase",
        "legal_basis": "Art. 17",
        "reason": "asked",
        "confirmed": "1",
    }
    body.update(fields)
    return client.post(ADD, body)


def test_a_privacy_officer_files_a_request_follows_it_and_reads_its_report(django_capture_on_commit_callbacks) -> None:
    agent, thread = _ana()
    officer = _officer()
    assert officer.get(ADD + "?user_id=u-ana").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        answer = _post_request(officer, identifiers="ana@example.org\n\n", agents=[agent.pk])
    request = ErasureRequest.objects.get()
    assert answer.status_code == 302 and answer["Location"] == f"{LIST}{request.pk}/change/"
    # Done, the request forgets the identifiers the officer typed (it names her by user id only).
    assert request.requested_by_name == "staff:pat" and request.identifiers == []
    assert request.agent_ids == [agent.pk] and request.status == "done"
    assert not Thread.objects.filter(pk=thread.pk).exists()

    listing = officer.get(LIST).content.decode()
    assert "u-ana" in listing and "er-done" in listing and "<progress" in listing and "pat" in listing
    page = officer.get(f"{LIST}{request.pk}/change/").content.decode()
    assert "Open the report" in page and request.report_sha256 in page and 'http-equiv="refresh"' not in page
    assert "none kept (a finished erasure forgets them)" in page and "ana@example.org" not in page
    report = officer.get(f"{LIST}{request.pk}/report/").content.decode()
    assert "found nothing left" in report and 'id="er-nothing-found"' in report and "memoryapp_entry" in report
    assert 'id="er-shredding"' in report and "Encryption at rest is off" in report
    audit = officer.get("/admin/governance/auditrecord/?action__exact=erasure.done").content.decode()
    assert f'href="{LIST}{request.pk}/change/"' in audit  # the audit list links the request
    downloaded = officer.get(f"{LIST}{request.pk}/report.json")
    assert hashlib.sha256(downloaded.content).hexdigest() == request.report_sha256
    assert 'id="er-receipt"' in report
    receipt = officer.get(f"{LIST}{request.pk}/report.json?receipt=1")
    assert receipt_verify(json.loads(receipt.content)) and receipt["Content-Disposition"].endswith('-receipt.json"')


def test_the_form_first_shows_what_would_go_and_the_holds_and_files_nothing() -> None:
    agent, thread = _ana()
    hold = LegalHold.objects.create(user_id="u-ana", reason="litigation", placed_by="pat")
    officer = _officer()
    page = _post_request(officer, confirmed="", agents=[agent.pk], identifiers="ana@example.org").content.decode()
    assert 'id="er-plan"' in page and 'id="er-confirm"' in page
    assert "threads about the person" in page and "<td>1</td>" in page  # one thread, one entry
    assert f"#{hold.pk}" in page and 'id="er-confirm-holds"' in page
    assert 'type="hidden" name="identifiers" value="ana@example.org"' in page
    assert f'type="hidden" name="agents" value="{agent.pk}"' in page
    assert not ErasureRequest.objects.exists() and Thread.objects.filter(pk=thread.pk).exists()
    assert not AuditRecord.objects.filter(action__startswith="erasure.").exists()


def test_a_running_request_page_refreshes_itself() -> None:
    officer = _officer()
    request = ErasureRequest.objects.create(user_id="u-ana", status="running", progress_done=3, progress_total=12)
    page = officer.get(f"{LIST}{request.pk}/change/").content.decode()
    assert 'http-equiv="refresh"' in page and 'value="3" max="12"' in page and "25%" in page


def test_a_bad_form_says_what_is_wrong_and_files_nothing() -> None:
    officer = _officer()
    answer = _post_request(officer, user_id="")
    assert answer.status_code == 200 and "This field is required" in answer.content.decode()
    answer = _post_request(officer, identifiers="ab")
    assert answer.status_code == 200 and "at least 3 characters" in answer.content.decode()
    answer = _post_request(officer, agents=["999999"])
    assert answer.status_code == 200 and "errorlist" in answer.content.decode()
    assert not ErasureRequest.objects.exists()
    assert not AuditRecord.objects.filter(action__startswith="erasure.").exists()


@pytest.mark.parametrize("role", ["Reviewers", "Operators"])
def test_reviewers_and_operators_can_neither_see_nor_file_requests(role: str) -> None:
    _, thread = _ana()
    request = ErasureRequest.objects.create(user_id="u-ana", status="failed", report={"summary": "x"})
    other = staff_client(username="other", groups=(role,))
    assert other.get(LIST).status_code == 403
    assert other.get(ADD).status_code == 403
    assert _post_request(other).status_code == 403
    assert other.get(f"{LIST}{request.pk}/change/").status_code == 403
    assert other.get(f"{LIST}{request.pk}/report/").status_code == 403
    assert other.get(f"{LIST}{request.pk}/report.json").status_code == 403
    assert other.post(f"{LIST}{request.pk}/retry/").status_code == 403
    assert other.post(f"{LIST}{request.pk}/retry/", {"post": "yes"}).status_code == 403
    assert ErasureRequest.objects.count() == 1 and ErasureRequest.objects.get().status == "failed"
    assert "erasurerequest" not in other.get("/admin/").content.decode()
    if role == "Reviewers":  # a reviewer reads the thread, without the way to erase its person
        page = other.get(f"/admin/memoryapp/thread/{thread.pk}/change/")
        assert page.status_code == 200 and "Erase this person" not in page.content.decode()


def test_erase_this_person_is_reachable_from_a_thread_and_an_item() -> None:
    agent, thread = _ana()
    item = MemoryItemFactory(agent=agent, user_id="u-ana", subject="Ana", attribute="city", value="Porto")
    officer = _officer()
    link = f"{ADD}?user_id=u-ana"
    assert link in officer.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert link in officer.get(f"/admin/memoryapp/memoryitem/{item.pk}/change/").content.decode()
    form = officer.get(link).content.decode()
    assert 'name="user_id" value="u-ana"' in form
    assert "erasurerequest" in officer.get("/admin/").content.decode()


def test_a_blocked_request_runs_again_from_its_page_once_the_hold_is_lifted(django_capture_on_commit_callbacks) -> None:
    _, thread = _ana()
    hold = LegalHold.objects.create(user_id="u-ana", reason="litigation", placed_by="pat")
    officer = _officer()
    with django_capture_on_commit_callbacks(execute=True):
        _post_request(officer)
    request = ErasureRequest.objects.get()
    page = officer.get(f"{LIST}{request.pk}/change/").content.decode()
    assert request.status == "blocked" and f"legal hold #{hold.pk}" in page and 'id="er-retry"' in page
    assert Thread.objects.filter(pk=thread.pk).exists()

    # "Run it again" first shows fresh counts (the agents wrote on since) and the hold still in the way.
    EntryFactory(thread=thread, role="user", content="One more thing about my sister.")
    asked = officer.post(f"{LIST}{request.pk}/retry/").content.decode()
    assert 'id="consequences"' in asked and f"#{hold.pk} still in force" in asked
    assert '<td class="n">2</td><td>entries deleted' in asked  # the new entry counted
    request.refresh_from_db()
    assert request.status == "blocked" and not AuditRecord.objects.filter(action="erasure.retry").exists()

    LegalHold.objects.filter(pk=hold.pk).update(lifted_at=timezone.now())
    assert "still in force" not in officer.post(f"{LIST}{request.pk}/retry/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        answer = officer.post(f"{LIST}{request.pk}/retry/", {"post": "yes"})
    assert answer.status_code == 302
    request.refresh_from_db()
    assert request.status == "done" and not Thread.objects.filter(pk=thread.pk).exists()
    assert request.counts["entries_deleted"] == 2
    # A done request is not run again.
    officer.post(f"{LIST}{request.pk}/retry/", {"post": "yes"})
    assert AuditRecord.objects.filter(action="erasure.retry").count() == 1


def test_a_request_whose_job_run_was_killed_can_be_run_again(django_capture_on_commit_callbacks) -> None:
    """A worker killed past the job's time limit fails the run (governance.jobs) but cannot tell the
    request: its page says so, stops refreshing, and runs it again."""
    _, thread = _ana()
    killed = JobRun.objects.create(kind="erasure", status="failed", error="time limit of 1800 s exceeded")
    request = ErasureRequest.objects.create(user_id="u-ana", status="running", phase="erasing", job_run=killed)
    officer = _officer()
    page = officer.get(f"{LIST}{request.pk}/change/").content.decode()
    assert 'id="er-stalled"' in page and 'id="er-retry"' in page and 'http-equiv="refresh"' not in page
    with django_capture_on_commit_callbacks(execute=True):
        officer.post(f"{LIST}{request.pk}/retry/", {"post": "yes"})
    request.refresh_from_db()
    assert request.status == "done" and request.job_run_id != killed.pk
    assert not Thread.objects.filter(pk=thread.pk).exists()


def test_the_message_after_filing_says_the_erasure_is_done_or_held(transactional_db: None) -> None:
    from governance.retention.holds import legal_hold_place

    agent, _ = _ana()
    officer = _officer()  # its commits are real here: the job runs eagerly after the filing's

    done = officer.post(ADD, {**_form(), "confirmed": "1"}, follow=True)
    first = ErasureRequest.objects.get()
    assert first.status == "done"
    assert [str(m) for m in done.context["messages"]] == [
        f"Erasure request #{first.pk} filed and done: its report says what was erased."
    ]

    ThreadFactory(agent=agent, external_id="t-ana-2", user_id="u-ana")
    legal_hold_place(agent=agent, user_id="u-ana", reason="case 42", placed_by="staff:pia")
    held = officer.post(ADD, {**_form(), "confirmed": "1"}, follow=True)
    second = ErasureRequest.objects.exclude(pk=first.pk).get()
    assert second.status == "blocked"
    assert [(m.level_tag, str(m)) for m in held.context["messages"]] == [
        ("warning", f"Erasure request #{second.pk} filed and stopped by a legal hold: nothing was erased.")
    ]


def _form() -> dict[str, str]:
    return {"user_id": "u-ana", "identifiers": "", "mode": "erase", "legal_basis": "Art. 17", "reason": "asked"}


def _dan_planted_across_kinds(django_capture_on_commit_callbacks: Any) -> dict[str, Any]:
    """Dan, planted in every kind an erasure touches: threads and items of his scope, a fact, files of
    his scope, an agent-wide note written at his turn, an agent-wide lesson quoting him, a playbook a
    reviewer promoted whose rule stands on his lesson and on Eve's, job runs naming him or his
    thread, access-log rows of his requests and one of Eve's that sent his item."""
    from memoryapp.consolidation.fold import PLAYBOOK_PATH, playbook_fold, playbook_promote
    from memoryapp.files.access import FileAccess
    from memoryapp.files.services import file_put
    from memoryapp.items.facts import fact_remember
    from memoryapp.items.rules import Scope
    from memoryapp.llm.port import use_model
    from memoryapp.search.access_log import access_log_record
    from tests.kit.consolidation import active_item, answers, scripted
    from tests.kit.factories import JobRunFactory, MemoryFileVersionFactory

    agent = AgentFactory(slug="alice")
    dan_threads = [ThreadFactory(agent=agent, external_id=f"t-dan-{n}", user_id="u-dan") for n in range(2)]
    said = [
        EntryFactory(thread=t, role="user", content=f"Always ask me the dates first, trip {n}.")
        for n, t in enumerate(dan_threads)
    ]
    own = [
        MemoryItemFactory(
            agent=agent,
            user_id="u-dan",
            subject="Dan",
            attribute=f"trip {n}",
            value=f"planning trip {n}",
            trust="user",
            evidence=[{"entry_id": e.id, "quote": "ask me the dates first"}],
        )
        for n, e in enumerate(said)
    ]
    fact_remember(agent=agent, namespace="users/u-dan", key="city", value="Porto")
    for n in range(2):
        MemoryFileVersionFactory(agent=agent, path=f"/memories/dan-{n}.md", content=f"dan {n}\n", user_id="u-dan")
    file_put(access=FileAccess(agent=agent, place=said[0]), path="/memories/notes.md", text="dates first\n")
    eve_thread = ThreadFactory(agent=agent, external_id="t-eve", user_id="u-eve")
    eve_said = EntryFactory(thread=eve_thread, role="user", content="Please quote prices in euros, always.")
    dan_lesson = active_item(
        agent=agent, kind="lesson", subject="booking", attribute="dates", value="Ask for the dates first", user_id="",
        trust="user", evidence=[{"entry_id": said[1].id, "quote": "ask me the dates first"}],
    )  # fmt: skip
    eve_lesson = active_item(
        agent=agent, kind="lesson", subject="booking", attribute="euros", value="Quote prices in euros", user_id="",
        trust="user", evidence=[{"entry_id": eve_said.id, "quote": "quote prices in euros"}],
    )  # fmt: skip
    shared_rule = f"Ask for the dates, quote in euros. [lesson:{dan_lesson.pk}] [lesson:{eve_lesson.pk}]"
    rules = [shared_rule, f"Prices in euros. [lesson:{eve_lesson.pk}]"]
    with use_model(scripted(answers(*({"op": "add", "rule": r} for r in rules)))):
        folded = playbook_fold(agent=agent, scope=Scope())
    assert folded is not None and not folded.unfinished, folded
    playbook_promote(agent=agent, scope=Scope(), actor="staff:rita")
    assert MemoryFileVersion.objects.filter(agent=agent, path=PLAYBOOK_PATH, user_id="").exists()
    JobRunFactory(kind="extract", agent_id=agent.pk, arguments={"thread_pk": dan_threads[0].pk})
    JobRunFactory(kind="export", agent_id=agent.pk, arguments={"user_id": "u-dan"}, result={"rows": 3})
    for thread in dan_threads:
        access_log_record(agent_id=agent.pk, thread=thread, source="context", item_ids=[own[0].pk])
    access_log_record(agent_id=agent.pk, thread=eve_thread, source="context", item_ids=[own[1].pk, eve_lesson.pk])
    return {"agent": agent, "shared_rule": shared_rule, "eve_lesson": eve_lesson, "dan_lesson": dan_lesson}


def test_the_erasure_preview_counts_what_the_report_counts_and_names_the_shared_playbook_rule(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The confirm step is a dry run of the erasure's own steps (issue 23 §15): the same counts as
    the report, across kinds, and the shared playbook rule it removes, named with the other lesson."""
    from governance.erasure.services import erasure_preview

    planted = _dan_planted_across_kinds(django_capture_on_commit_callbacks)
    preview = erasure_preview(user_id="u-dan")
    for kind in ("items_purged", "file_versions", "job_runs", "playbook_rules", "access_rows_deleted"):
        assert preview.counts[kind] > 0, kind
    assert preview.counts["access_rows_stripped"] == 1
    # The dry run changed nothing.
    assert Thread.objects.filter(user_id="u-dan").count() == 2
    assert MemoryItem.objects.filter(pk=planted["dan_lesson"].pk).exists()
    assert not AuditRecord.objects.filter(actor="erasure:dry-run").exists()

    officer = _officer()
    page = _post_request(officer, user_id="u-dan", confirmed="").content.decode()
    assert 'id="er-shared-files"' in page and "/memories/playbook.md" in page
    assert "Ask for the dates, quote in euros." in page and "staff:rita" in page
    assert f"also stood on lesson of others: {planted['eve_lesson'].pk}" in page
    assert "/memories/notes.md" in page  # the agent-wide note written at his turn, redacted
    assert 'id="er-shared-items"' in page and planted["dan_lesson"].pk in page
    assert "playbook rules removed" in page and "access-log rows of their requests deleted" in page

    with django_capture_on_commit_callbacks(execute=True):
        _post_request(officer, user_id="u-dan")
    request = ErasureRequest.objects.get()
    assert request.status == "done"
    assert request.counts == preview.counts
    report = officer.get(f"{LIST}{request.pk}/report/").content.decode()
    assert "playbook rules removed" in report


@pytest.mark.django_db(transaction=True)  # as in production: the dry run is a transaction of its own
def test_the_dry_run_with_encryption_on_leaves_the_persons_data_key_and_counts_its_destruction(
    encrypted: Any,  # noqa: F811  (the fixture imported above)
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The dry run runs the crypto-shredding step too and rolls it back: the person's rows still open
    after it, and the erasure then destroys the key it counted."""
    from governance.crypto.envelope import data_keys_of_person
    from governance.erasure.services import erasure_preview
    from tests.kit.factories import JobRunFactory, MemoryFileVersionFactory

    agent, thread = _ana()
    item = MemoryItemFactory(agent=agent, user_id="u-ana", attribute="city", value="Porto")
    JobRunFactory(kind="extract", agent_id=agent.pk, arguments={"thread_pk": thread.pk}, result={"items": 1})
    JobRunFactory(kind="export", agent_id=agent.pk, arguments={"user_id": "u-ana"}, result={"user_id": "u-ana"})
    MemoryFileVersionFactory(agent=agent, path="/memories/ana.md", content="Porto\n", user_id="u-ana")
    preview = erasure_preview(user_id="u-ana")
    assert preview.counts["job_runs"] == 2 and preview.counts["file_versions"] == 1
    assert preview.counts["data_keys_destroyed"] == 1 and preview.counts["items_purged"] == 1
    keys = data_keys_of_person(user_id="u-ana", agent_ids=[])
    assert keys and all(k["destroyed_at"] is None for k in keys)
    assert MemoryItem.objects.get(pk=item.pk).value == "Porto"  # still opens
    assert Thread.objects.get(pk=thread.pk).entries.get().text.startswith("I moved to Porto")

    with django_capture_on_commit_callbacks(execute=True):
        _post_request(_officer())
    request = ErasureRequest.objects.get()
    assert request.status == "done" and request.counts == preview.counts


@pytest.mark.django_db(transaction=True)  # two connections: the dry run's thread, and this test's
def test_an_audit_write_of_another_connection_completes_while_an_erasure_dry_run_is_under_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dry run's audit records are rolled back anyway: it collects them without the chain's lock,
    so the service's other audit writes do not wait for a preview (issue 23 §15)."""
    import threading

    from django.db import connection, transaction

    from governance.audit.chain import audit_append
    from governance.erasure import services

    _ana()
    inside, release = threading.Event(), threading.Event()
    original = services.exports_forget_person

    def held_open(**kwargs: Any) -> Any:  # after `person_erase` and its audit appends
        inside.set()
        release.wait(60)
        return original(**kwargs)

    monkeypatch.setattr(services, "exports_forget_person", held_open)
    found: dict[str, Any] = {}

    def preview() -> None:
        try:
            found["dry_run"] = services.erasure_dry_run(user_id="u-ana")
        finally:
            connection.close()

    worker = threading.Thread(target=preview)
    worker.start()
    try:
        assert inside.wait(60), "the dry run did not reach its export step"
        with transaction.atomic():
            with connection.cursor() as cursor:  # without it, a lock held by the dry run hangs the test
                cursor.execute("SET LOCAL lock_timeout = '20s'")
            audit_append(action="key.revoked", actor="staff:other", subject="k-1")
        assert AuditRecord.objects.filter(action="key.revoked").count() == 1
    finally:
        release.set()
        worker.join(60)
    assert found["dry_run"].counts["threads"] == 1
    assert not AuditRecord.objects.filter(actor="erasure:dry-run").exists()
    assert Thread.objects.filter(user_id="u-ana").exists()


def test_the_preview_counts_the_mentions_its_identifiers_erase_as_the_report_does(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The request's other identifiers act in the erasure: its dry run gets them too (issue 23 §15)."""
    from governance.erasure.services import erasure_preview

    agent, _ = _ana()
    ben = ThreadFactory(agent=agent, external_id="t-ben", user_id="u-ben")
    EntryFactory(thread=ben, role="user", content="Please forward the invoice to ana.silva@example.org today.")
    preview = erasure_preview(user_id="u-ana", identifiers=["ana.silva@example.org"])
    without = erasure_preview(user_id="u-ana")
    mentions = {k: v for k, v in preview.counts.items() if k.startswith("mentions_") and v}
    assert mentions and not any(v for k, v in without.counts.items() if k.startswith("mentions_"))

    with django_capture_on_commit_callbacks(execute=True):
        _post_request(_officer(), identifiers="ana.silva@example.org")
    request = ErasureRequest.objects.get()
    assert request.status == "done" and request.counts == preview.counts


def test_the_confirm_step_shows_the_mention_groups_and_an_excluded_group_is_kept_with_its_reason(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Issue 25 §4: the groups of rows naming the person, counted by kind with examples; the officer
    keeps one for a typed reason, which the filing's audit record carries (never content)."""
    agent, _ = _ana()
    ben = ThreadFactory(agent=agent, external_id="t-ben", user_id="u-ben")
    said = EntryFactory(thread=ben, role="user", content="Please forward the invoice to ana.silva@example.org today.")
    MemoryItemFactory(agent=agent, subject="Invoices", attribute="contact", value="ana.silva@example.org", user_id="")
    officer = _officer()

    shown = _post_request(officer, identifiers="ana.silva@example.org", confirmed="")
    page = shown.content.decode()
    assert shown.status_code == 200 and 'id="er-mentions-entry"' in page
    assert 'id="er-mentions-item"' in page
    assert said.pk in page  # an example of the group
    assert 'name="exclude_entry"' in page and 'form="er-confirm-form"' in page

    with django_capture_on_commit_callbacks(execute=True):
        _post_request(officer, identifiers="ana.silva@example.org", exclude_entry="legal_claims")
    request = ErasureRequest.objects.get()
    assert request.status == "done" and request.excluded == {"entry": "legal_claims"}
    said.refresh_from_db()
    assert "ana.silva@example.org" in said.text  # the group kept
    assert not MemoryItem.objects.filter(agent=agent, value__contains="ana.silva").exists()
    filed = AuditRecord.objects.get(action="erasure.request")
    assert filed.details["excluded"] == {"entry": "legal_claims"}
    assert "ana.silva" not in json.dumps(filed.details)


def test_running_a_finished_request_again_is_refused_before_any_confirm_page(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Only a failed, blocked or stalled request runs again: a done one gets no 'Run again?' page (nor
    the dry run of a whole erasure behind it), only the reason, on its own page."""
    _ana()
    officer = _officer()
    with django_capture_on_commit_callbacks(execute=True):
        _post_request(officer)
    request = ErasureRequest.objects.get()
    assert request.status == "done"
    answer = officer.post(f"{LIST}{request.pk}/retry/", follow=True)
    page = answer.content.decode()
    assert answer.redirect_chain == [(f"{LIST}{request.pk}/change/", 302)]
    assert "it is not run again" in page and "again?" not in page
    request.refresh_from_db()
    assert request.status == "done"
