"""Public, unauthenticated pages under /.well-known/: the key that checks signed receipts."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.http import require_safe

from governance.receipts import public_key_document, public_key_pem


@require_safe
def receipt_key(request: HttpRequest) -> JsonResponse:
    """The receipt-signing public key: key id, raw key (base64 and hex) and PEM (see governance.receipts)."""
    response = JsonResponse(public_key_document())
    response["Cache-Control"] = "public, max-age=300"
    return response


@require_safe
def receipt_key_pem(request: HttpRequest) -> HttpResponse:
    """The same key as a PEM file, for `openssl pkeyutl -verify` or `manage.py receipt_verify --public-key`."""
    response = HttpResponse(public_key_pem(), content_type="application/x-pem-file")
    response["Cache-Control"] = "public, max-age=300"
    return response
