"""The staff API of export requests: a request's state and its archive, for a staff member signed in
to the admin (Django session) who may see export requests. Agents' keys never reach it: it reads
no Authorization header, and an agent is no staff member (401 without a session, 403 without the
permission, in the API's error shape)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_safe

from governance.export.admin import archive_response
from governance.export.services import export_archive_path
from governance.models import ExportRequest

PERMISSION = "governance.view_exportrequest"


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


def _refused(request: HttpRequest) -> JsonResponse | None:
    user = request.user
    if not user.is_authenticated or not user.is_active or not user.is_staff:
        return _error(401, "not_authenticated", "Sign in to the admin as staff: this API takes no agent key.")
    if not user.has_perm(PERMISSION):
        return _error(403, "permission_denied", "Export requests are for privacy officers.")
    return None


def _found(pk: int) -> ExportRequest | None:
    return ExportRequest.objects.filter(pk=pk).first()


@require_safe
def export_state(request: HttpRequest, pk: int) -> HttpResponse:
    """GET /api/v1/staff/exports/{id}: status, progress, counts, the manifest's hash and the archive's URL."""
    if (refused := _refused(request)) is not None:
        return refused
    export = _found(pk)
    if export is None:
        return _error(404, "not_found", "Export request was not found.")
    ready = export_archive_path(export) is not None
    return JsonResponse(
        {
            "id": export.pk,
            "user_id": export.user_id,
            "agent_ids": export.agent_ids,
            "include_vectors": export.include_vectors,
            "status": export.status,
            "progress": {"done": export.progress_done, "total": export.progress_total},
            "requested_by": export.requested_by,
            "created_at": export.created_at.isoformat(),
            "finished_at": export.finished_at.isoformat() if export.finished_at else None,
            "counts": export.counts,
            "archive_size": export.archive_size if ready else None,
            "manifest_sha256": export.manifest_sha256 or None,
            "archive_url": reverse("staff-export-archive", args=[export.pk]) if ready else None,
            "error": export.error or None,
        }
    )


@require_safe
def export_archive(request: HttpRequest, pk: int) -> HttpResponseBase:
    """GET /api/v1/staff/exports/{id}/archive: the zip, streamed from disk (audited as a download)."""
    if (refused := _refused(request)) is not None:
        return refused
    export = _found(pk)
    if export is None:
        return _error(404, "not_found", "Export request was not found.")
    if export_archive_path(export) is None:
        return _error(409, "not_ready", f"Export #{export.pk} is {export.status}: its archive is not ready.")
    return archive_response(request, export)
