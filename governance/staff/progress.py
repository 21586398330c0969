"""A job run's progress as the admin pages show it (`done / total · percent · rate`, a bar the page's
script redraws while the run runs): the job-run list and the export requests' pages alike."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from governance.models import JobRun

OPEN = (JobRun.Status.QUEUED, JobRun.Status.RUNNING)


def run_rate(run: JobRun, *, now: datetime | None = None) -> float | None:
    """Units done per second since the run started (to its end, or now while it runs)."""
    if not run.started_at or not run.progress_done:
        return None
    end = run.finished_at or now or timezone.now()
    seconds = (end - run.started_at).total_seconds()
    return run.progress_done / seconds if seconds > 0 else None


def progress_text(run: JobRun) -> str:
    """`done / total · percent · rate`, what of it is known."""
    parts: list[str] = []
    if run.progress_total:
        parts += [
            f"{run.progress_done} / {run.progress_total}",
            f"{int(100 * run.progress_done / run.progress_total)}%",
        ]
    elif run.progress_done:
        parts.append(f"{run.progress_done} done")
    rate = run_rate(run)
    if rate is not None:
        parts.append(f"{rate:.1f}/s" if rate >= 0.1 else f"{rate * 60:.1f}/min")
    return " · ".join(parts)


def run_status_label(run: JobRun) -> str:
    """A run's status as what happened: an erasure stopped by a legal hold ends its run without an
    error (nothing failed), but nothing was erased either, so it does not read "succeeded"; a run
    that found nothing to do says so."""
    result = run.result if isinstance(run.result, dict) else {}
    if run.status == JobRun.Status.SUCCEEDED and result.get("blocked_by"):
        holds = result["blocked_by"] if isinstance(result["blocked_by"], list) else []
        named = ", ".join(f"#{pk}" for pk in holds)
        return f"Blocked by legal hold {named}" if named else "Blocked by a legal hold"
    if run.status == JobRun.Status.SUCCEEDED and result.get("skipped"):
        return f"Nothing to do: {result['skipped']}"
    return str(run.get_status_display())


def progress_state(run: JobRun) -> dict[str, Any]:
    """What the page's script needs to redraw a run's progress (the JSON endpoint's rows)."""
    return {
        "id": run.pk,
        "status": run.status,
        "status_label": run_status_label(run),
        "done": run.progress_done,
        "total": run.progress_total,
        "text": progress_text(run),
        "open": run.status in OPEN,
    }


def progress_bar(run: JobRun) -> SafeString:
    if run.progress_total:
        bar = format_html('<progress value="{}" max="{}"></progress>', run.progress_done, run.progress_total)
    elif run.status == JobRun.Status.RUNNING:
        bar = mark_safe("<progress></progress>")  # running, size unknown: an indeterminate bar
    else:
        bar = mark_safe("")
    return format_html(
        '<span class="jr-progress" data-run="{}" data-open="{}">{} <span class="jr-text">{}</span></span>',
        run.pk,
        "1" if run.status in OPEN else "",
        bar,
        progress_text(run) or ("—" if not bar else ""),
    )
