"""A NUL in a URL is refused before any view runs.

`%00` decodes to a NUL in a path segment or a query value; PostgreSQL refuses it in every text
comparison, so without this check each lookup by id (`/threads/a%00b`, `?place=...`) would have
to guard it alone. No id can hold one, so a path with a NUL names nothing (404); a query value
with one is a 400 naming the parameter, and so is a field of an admin form. Admin pages get the
same statuses without the JSON body.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotFound,
    JsonResponse,
    QueryDict,
)

from memoryapp.api.errors import error_body

API_PREFIX = "/api/"


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _nul_in(params: QueryDict, whole: str) -> str | None:
    for name, values in params.lists():
        if "\x00" in name:
            return whole
        if any("\x00" in value for value in values):
            return name
    return None


def _nul_parameter(request: HttpRequest, *, api: bool) -> str | None:
    found = _nul_in(request.GET, "query")
    # The admin's forms (a reviewer's edited value, a reason): the API takes JSON only, and
    # its parser names the field itself.
    if found is None and not api and request.method == "POST" and request.content_type in FORM_TYPES:
        found = _nul_in(request.POST, "form")
    return found


class RefuseNulInUrlMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path_info.startswith(API_PREFIX)
        if "\x00" in request.path_info:
            if api:
                return JsonResponse(error_body("not_found", "Not found."), status=404)
            return HttpResponseNotFound()
        parameter = _nul_parameter(request, api=api)
        if parameter is not None:
            message = f"{parameter}: NUL characters are not allowed."
            if api:
                return JsonResponse(error_body("invalid_text", message, parameter), status=400)
            return HttpResponseBadRequest(message)
        return self.get_response(request)
