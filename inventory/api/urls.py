from django.contrib.auth.decorators import login_required
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from inventory.api import views

# DRF views answer 401/403 themselves (token or session auth) and are exempt from the login
# redirect; the human-facing docs page is not, so it says where to log in.
urlpatterns = [
    path("hosts/", views.HostList.as_view(), name="api-hosts"),
    path("hosts/<str:name>/samples/", views.HostSamples.as_view(), name="api-host-samples"),
    path("hosts/<str:name>/ledger/", views.HostLedger.as_view(), name="api-host-ledger"),
    path("oom/", views.OomEventList.as_view(), name="api-oom"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "docs/",
        # Split: its start-up script is a file of its own, not inline, for the CSP.
        login_required(
            SpectacularSwaggerSplitView.as_view(
                url_name="api-schema", template_name="api/swagger_ui.html"
            )
        ),
        name="api-docs",
    ),
]
