from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import include, path
from django.views.i18n import JavaScriptCatalog, set_language

from console import health
from console.alerts import urls as alert_urls
from console.audit import api as audit_api
from console.audit import views as audit
from console.core.preferences import views as preferences
from console.operations import urls as operation_urls
from console.proposals import api as proposal_api
from console.proposals import urls as proposal_urls
from inventory.api import metrics
from inventory.views import dead_letters, events, fleet, hosts, models, oom
from runbooks import urls as runbook_urls

urlpatterns = [
    path("", fleet.fleet, name="fleet"),
    path("hosts/<str:name>/", hosts.host_detail, name="host-detail"),
    path("hosts/<str:name>/charts/", hosts.host_charts, name="host-charts"),
    path("hosts/<str:name>/analysis/", hosts.host_analysis, name="host-analysis"),
    path("events/<int:pk>/acknowledge/", events.acknowledge_event, name="event-acknowledge"),
    path("models/", models.model_list, name="model-list"),
    path("models/<int:pk>/", models.model_detail, name="model-detail"),
    path("oom/", oom.oom_history_page, name="oom-history"),
    path("oom/export.csv", oom.oom_export, name="oom-export"),
    path("audit/", audit.audit_list, name="audit-list"),
    path("audit/export.csv", audit.audit_export, name="audit-export"),
    path("export.csv", fleet.fleet_export, name="fleet-export"),
    path("demo/history-progress/", fleet.demo_history_progress, name="demo-history-progress"),
    path("events/export.csv", events.event_export, name="event-export"),
    path("ingest/dead-letters/", dead_letters.dead_letter_list, name="dead-letter-list"),
    path(
        "ingest/dead-letters/<int:pk>/",
        dead_letters.dead_letter_detail,
        name="dead-letter-detail",
    ),
    path(
        "ingest/dead-letters/<int:pk>/replay/",
        dead_letters.dead_letter_replay,
        name="dead-letter-replay",
    ),
    path(
        "ingest/dead-letters/<int:pk>/discard/",
        dead_letters.dead_letter_discard,
        name="dead-letter-discard",
    ),
    path("runbooks/", include("runbooks.urls")),
    path("proposals/", include("console.proposals.urls")),
    path("api/proposals/", include(proposal_urls.api_urlpatterns)),
    path("api/audit/", audit_api.AuditList.as_view(), name="api-audit"),
    path("api/runbooks/", include(runbook_urls.api_urlpatterns)),
    path("alerts/", include("console.alerts.urls")),
    path("api/alerts/", include(alert_urls.api_urlpatterns)),
    path("api/host-actions/", include(operation_urls.api_urlpatterns)),
    path("api/placement/", proposal_api.Placement.as_view(), name="api-placement"),
    path("api/", include("inventory.api.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/profile/", preferences.profile, name="profile"),
    path(
        "accounts/profile/time-zone/",
        preferences.browser_time_zone,
        name="profile-browser-time-zone",
    ),
    path("metrics", metrics.Metrics.as_view(), name="metrics"),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("admin/", admin.site.urls),
    path("i18n/setlang/", login_not_required(set_language), name="set_language"),
    path(
        "jsi18n/",
        login_not_required(JavaScriptCatalog.as_view()),
        name="javascript-catalog",
    ),
    path("hosts/<str:name>/operations/", include(operation_urls.host_urlpatterns)),
    path("operations/", include(operation_urls.urlpatterns)),
]

handler403 = "console.errors.permission_denied"
handler404 = "console.errors.page_not_found"
