"""One shape for every error: {"error": {"code", "message", "field"?}} with the right status."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.request import UnreadablePostError
from django.views import defaults
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from memoryapp.api.base import OutputSerializer
from memoryapp.errors import DomainError, TooManyRequests
from memoryapp.screening.screen import refusal_record

logger = logging.getLogger(__name__)

# What a client waits before it asks again while the database is away (503 `database_unavailable`).
DATABASE_RETRY_AFTER_SECONDS = 5


def _first_field_error(detail: Any, prefix: str = "") -> tuple[str | None, str, str]:
    """(field path, message, code) of the first error inside a ValidationError's detail."""
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = str(key)
            path = name if not prefix else f"{prefix}.{name}"
            if name == "non_field_errors":
                path = prefix or None  # type: ignore[assignment]
            field, message, code = _first_field_error(value, path or "")
            return field or path or None, message, code
    if isinstance(detail, list):
        for index, value in enumerate(detail):
            if isinstance(value, (dict, list)) and value:
                inner_prefix = f"{prefix}[{index}]" if isinstance(value, dict) else prefix
                return _first_field_error(value, inner_prefix)
            if value:
                return _first_field_error(value, prefix)
    if isinstance(detail, exceptions.ErrorDetail):
        return (prefix or None), str(detail), str(detail.code or "invalid")
    return (prefix or None), str(detail), "invalid"


class ErrorDetailOut(OutputSerializer):
    code = serializers.CharField(help_text="What went wrong, for programs: `not_found`, `unknown_field`, ...")
    message = serializers.CharField(help_text="What went wrong, for people.")
    field = serializers.CharField(
        required=False, help_text="The input at fault (`entries[3].role`, a query parameter), when there is one."
    )


class ErrorOut(OutputSerializer):
    """The one error shape of the API (`error_body` builds it: errors are rare, and middleware writes them too)."""

    error = ErrorDetailOut()


def error_body(
    code: str, message: str, field: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The error; a few carry ids a program acts on (`legal_hold`: `user_id`, `holds`) beside them."""
    body: dict[str, Any] = {**(details or {}), "code": code, "message": message}
    if field:
        body["field"] = field
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        refusal_record(exc)  # the write rolled back: its refusal is audited now
        response = Response(error_body(exc.code, exc.message, exc.field, exc.details), status=exc.status)
        if isinstance(exc, TooManyRequests):
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, exceptions.ValidationError):
        field, message, code = _first_field_error(exc.detail)
        if code in ("invalid", "null", "required", "blank") and field:
            message = f"{field}: {message}"
        return Response(error_body(code if code != "invalid" else "invalid_value", message, field), status=400)
    if isinstance(exc, exceptions.ParseError):
        return Response(error_body("malformed_json", f"The request body is not valid JSON: {exc.detail}"), status=400)
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return Response(error_body("unsupported_media_type", str(exc.detail)), status=415)
    if isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        code = "not_authenticated" if isinstance(exc, exceptions.NotAuthenticated) else "invalid_key"
        message = (
            "An API key is required: Authorization: Bearer <key>." if code == "not_authenticated" else str(exc.detail)
        )
        response = Response(error_body(code, message), status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    if isinstance(exc, (Http404, exceptions.NotFound)):
        return Response(error_body("not_found", "Not found."), status=404)
    if isinstance(exc, (PermissionDenied, exceptions.PermissionDenied)):
        return Response(error_body("permission_denied", "This key may not do that."), status=403)
    if isinstance(exc, exceptions.MethodNotAllowed):
        return Response(error_body("method_not_allowed", str(exc.detail)), status=405)
    if isinstance(exc, exceptions.Throttled):
        # The key's request rate (memoryapp.api.limits.KeyRateThrottle).
        wait = max(1, math.ceil(getattr(exc, "wait", None) or 1))
        message = f"This key sends more requests than its rate limit allows; retry in {wait} s."
        response = Response(error_body("rate_limited", message), status=429)
        response["Retry-After"] = str(wait)
        return response
    if isinstance(exc, exceptions.APIException):
        return Response(error_body(str(exc.default_code), str(exc.detail)), status=exc.status_code)
    if isinstance(exc, DataError):
        # A value the database refuses (a NUL character, a number out of range): the input's fault.
        return Response(error_body("invalid_value", "A value of the request cannot be stored."), status=400)
    if isinstance(exc, IntegrityError):
        # A constraint caught two requests racing past a service's own check: the later one
        # changed nothing (its transaction rolled back) and may simply try again.
        logger.warning("integrity error in %s: %s", context.get("view"), exc)
        return Response(
            error_body("conflict", "Another request changed the same data at the same time; try again."), status=409
        )
    if isinstance(exc, UnreadablePostError):
        # The body could not be read: it was cut off, or did not arrive in time (REQUEST_BODY_SECONDS).
        if type(exc.__cause__).__name__ == "BodyTimeout":
            return Response(error_body("request_timeout", str(exc.__cause__), "body"), status=408)
        return Response(error_body("invalid_body", "The request body could not be read.", "body"), status=400)
    if isinstance(exc, (OperationalError, InterfaceError)):
        # The database is away (down, restarting, out of connections) or did not answer in time:
        # the request changed nothing it could keep, and asking again later is the client's remedy,
        # as /readyz's 503 tells a load balancer. A deadlock lost every try is a 503 `busy` already
        # (memoryapp.retry).
        logger.warning("database unavailable in %s: %s", context.get("view"), type(exc).__name__)
        return database_unavailable()
    logger.exception("unhandled error in %s", context.get("view"))
    return Response(
        error_body("internal_error", "Something went wrong on our side."), status=status.HTTP_500_INTERNAL_SERVER_ERROR
    )


def database_unavailable() -> Response:
    """503 `database_unavailable` with Retry-After, in the one error shape."""
    response = Response(
        error_body(
            "database_unavailable",
            f"The database cannot be reached right now; retry in {DATABASE_RETRY_AFTER_SECONDS} s.",
        ),
        status=503,
    )
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith("/api/")


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 404 for a URL no route matches: under /api/ in the API's error shape."""
    if _is_api(request):
        return JsonResponse(error_body("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """Django's 403 outside DRF's views: under /api/ in the API's error shape; elsewhere the admin's
    page saying which permission and role the page needs (templates/403.html)."""
    if _is_api(request):
        return JsonResponse(error_body("forbidden", str(exception) or "Not allowed."), status=403)
    return defaults.permission_denied(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's 500 for an error outside DRF's views (a middleware): under /api/ in the API's error shape."""
    if _is_api(request):
        return JsonResponse(error_body("internal_error", "Something went wrong on our side."), status=500)
    return defaults.server_error(request)
