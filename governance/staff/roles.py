"""The staff roles, as Django groups kept in step with this table after every `migrate`.

Give a staff user a group in the admin (Authentication → Users) and they can do that job and no
more. A group's permissions are set to exactly these on each migrate, so a release that changes a
role changes it everywhere; staff-made groups are left alone.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, Permission
from django.db.models import Q

ROLES: dict[str, tuple[str, ...]] = {
    # Clear the queue of suggested items: read the conversations they quote, decide. Letting an item
    # go (forget_memoryitem) is not theirs: it takes memory away about a person, a privacy officer's call.
    "Reviewers": (
        "memoryapp.view_memoryitem",
        "memoryapp.change_memoryitem",
        "memoryapp.view_evidence",
        "memoryapp.view_entity",
        "memoryapp.view_thread",
        "memoryapp.view_entry",
        "memoryapp.view_agent",
        # Which thread a person's chat on a channel goes to (channel sessions: read only).
        "memoryapp.view_channelsession",
        # Between runs: promote or discard playbook drafts, take back a dedupe pass's stale marks.
        "memoryapp.view_playbookdraft",
        "memoryapp.promote_playbook",
        "memoryapp.view_staleitem",
        "memoryapp.undo_stale",
        "memoryapp.view_entityoverview",
        # Turns screening held (memoryapp.screening): read them, release them into memory.
        "memoryapp.view_heldentry",
        "memoryapp.release_heldentry",
    ),
    # Find what memory holds about a person and take it away (delete, redact, let items go), and prove it.
    "Privacy officers": (
        "memoryapp.view_agent",
        "memoryapp.view_thread",
        "memoryapp.delete_thread",
        "memoryapp.view_channelsession",
        "memoryapp.view_entry",
        "memoryapp.delete_entry",
        # A turn screening held: deleted rather than released.
        "memoryapp.view_heldentry",
        "memoryapp.delete_heldentry",
        "memoryapp.view_memoryitem",
        "memoryapp.forget_memoryitem",
        "memoryapp.view_evidence",
        "memoryapp.view_entity",
        "memoryapp.view_memoryfileversion",
        "memoryapp.delete_memoryfileversion",
        "governance.view_auditrecord",
        "governance.view_jobrun",
        # Erasure requests: file one, follow it, run a failed or blocked one again, read its report.
        "governance.view_erasurerequest",
        "governance.add_erasurerequest",
        "governance.change_erasurerequest",
        # Retention: the policies and the prune (with operators); legal holds (theirs alone).
        "memoryapp.view_retentionpolicy",
        "memoryapp.add_retentionpolicy",
        "memoryapp.change_retentionpolicy",
        "memoryapp.delete_retentionpolicy",
        "memoryapp.run_prune",
        "memoryapp.view_legalhold",
        "memoryapp.add_legalhold",
        "memoryapp.change_legalhold",  # lifting a hold (a placed hold is never edited)
        # The identifiers registered for a person (e-mails, phones, names): read them opened, edit them.
        "memoryapp.view_personidentifier",
        "memoryapp.change_personidentifier",
        # Export requests (a person's access request): see them, download archives, file and rerun them.
        "governance.view_exportrequest",
        "governance.add_exportrequest",
        "governance.change_exportrequest",
    ),
    # Keep the service running: agents and their keys, jobs, schedules; no conversation content.
    "Operators": (
        "memoryapp.view_agent",
        "memoryapp.add_agent",
        "memoryapp.change_agent",
        "memoryapp.view_agentkey",
        "memoryapp.add_agentkey",
        "memoryapp.change_agentkey",
        # An agent's automatic compaction (window, trigger, strategy, summarizer): what runs and costs.
        "memoryapp.view_compactionsettings",
        "memoryapp.add_compactionsettings",
        "memoryapp.change_compactionsettings",
        # What screening at write does with each category of an agent's writes (memoryapp.screening).
        "memoryapp.view_screeningsettings",
        "memoryapp.change_screeningsettings",
        "memoryapp.view_webhook",
        "memoryapp.add_webhook",
        "memoryapp.change_webhook",
        "memoryapp.delete_webhook",
        "memoryapp.view_webhookdelivery",
        "governance.view_jobrun",
        "governance.change_jobrun",  # send a failed run again (the job-run page shows, never edits)
        "governance.view_auditrecord",
        "django_celery_beat.view_periodictask",
        "django_celery_beat.change_periodictask",
        # Retention: the policies and the prune (legal holds are the privacy officers' alone).
        "memoryapp.view_retentionpolicy",
        "memoryapp.add_retentionpolicy",
        "memoryapp.change_retentionpolicy",
        "memoryapp.delete_retentionpolicy",
        "memoryapp.run_prune",
        # Knowledge documents (manuals, policies an agent recalls beside its memory): reference
        # material the operator keeps, not conversation content.
        "memoryapp.view_knowledgedocument",
        "memoryapp.add_knowledgedocument",
        "memoryapp.change_knowledgedocument",
        "memoryapp.delete_knowledgedocument",
    ),
}


def roles_sync(**signal_arguments: Any) -> None:
    """Create or update the role groups (a post_migrate receiver; safe to run any number of times)."""

    for name, codes in ROLES.items():
        wanted = Q(pk__in=[])
        for code in codes:
            app_label, codename = code.split(".", 1)
            wanted |= Q(content_type__app_label=app_label, codename=codename)
        permissions = list(Permission.objects.filter(wanted))
        if len(permissions) < len(codes):
            continue  # an app's permissions are not created yet: the post_migrate of that app comes later
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(permissions)
