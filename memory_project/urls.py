from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from governance.export.views import export_archive, export_state
from governance.wellknown import receipt_key, receipt_key_pem
from memory_project.health import healthz, readyz
from memoryapp.admin.people import person_view
from memoryapp.mcp.http import mcp_endpoint

urlpatterns = [
    path("", RedirectView.as_view(url="/admin/", permanent=False)),
    path("healthz", healthz, name="healthz"),
    path("readyz", readyz, name="readyz"),
    # The public key of signed receipts (governance.receipts), for anyone checking one offline.
    path(".well-known/memory-receipt-key", receipt_key, name="receipt-key"),
    path(".well-known/memory-receipt-key.pem", receipt_key_pem, name="receipt-key-pem"),
    # A person's page: what memory holds about one person id, across agents (memoryapp.admin.people).
    path("admin/person/", admin.site.admin_view(person_view), name="admin-person"),
    path("admin/", admin.site.urls),
    # Staff (an admin session with the permission), not agents: a person's export request and its archive.
    path("api/v1/staff/exports/<int:pk>", export_state, name="staff-export"),
    path("api/v1/staff/exports/<int:pk>/archive", export_archive, name="staff-export-archive"),
    path("api/v1/", include("memoryapp.api.urls")),
    # The MCP server (streamable HTTP); with and without the slash, as MCP clients are configured either way.
    path("mcp/", mcp_endpoint, name="mcp"),
    path("mcp", mcp_endpoint),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
]

# Under /api/, a URL no route matches answers in the API's error shape too.
handler404 = "memoryapp.api.errors.page_not_found"
# A refused admin page says which permission and role it needs (templates/403.html).
handler403 = "memoryapp.api.errors.permission_denied"
handler500 = "memoryapp.api.errors.server_error"
