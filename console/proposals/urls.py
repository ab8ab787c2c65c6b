from django.urls import path

from console.proposals import api, views
from console.proposals.loadtest import views as loadtest_views

urlpatterns = [
    path("", views.proposal_list, name="proposal-list"),
    path("inbox/", views.inbox, name="proposal-inbox"),
    path("export.csv", views.proposal_export, name="proposal-export"),
    path("new/", views.proposal_create, name="proposal-create"),
    path("new/preview/", views.proposal_preview, name="proposal-preview"),
    path("new/hosts/", views.host_search, name="proposal-host-search"),
    path("<int:pk>/", views.proposal_detail, name="proposal-detail"),
    path("<int:pk>/edit/", views.proposal_edit, name="proposal-edit"),
    path("<int:pk>/edit/preview/", views.proposal_preview_edit, name="proposal-preview-edit"),
    path("<int:pk>/submit/", views.proposal_submit, name="proposal-submit"),
    path("<int:pk>/status/", views.proposal_status, name="proposal-status"),
    path("<int:pk>/decide/", views.proposal_decide, name="proposal-decide"),
    path("<int:pk>/load-tests/", views.proposal_load_test, name="proposal-load-test"),
    path("<int:pk>/apply/", views.proposal_apply, name="proposal-apply"),
    path("<int:pk>/verify/", views.proposal_verify, name="proposal-verify"),
    path("<int:pk>/roll-back/", views.proposal_roll_back, name="proposal-roll-back"),
    path(
        "<int:pk>/load-tests/run/",
        loadtest_views.load_test_start,
        name="proposal-load-test-start",
    ),
    path(
        "<int:pk>/load-tests/<int:test_pk>/",
        loadtest_views.load_test_result,
        name="proposal-load-test-result",
    ),
    path(
        "<int:pk>/load-tests/<int:test_pk>/status.json",
        loadtest_views.load_test_status,
        name="proposal-load-test-status",
    ),
    path(
        "<int:pk>/load-tests/<int:test_pk>/cancel/",
        loadtest_views.load_test_cancel,
        name="proposal-load-test-cancel",
    ),
]

# Mounted under /api/proposals/ (DRF answers 401/403 itself, no login redirect).
api_urlpatterns = [
    path("", api.ProposalList.as_view(), name="api-proposals"),
    path("<int:pk>/", api.ProposalDetail.as_view(), name="api-proposal-detail"),
]
