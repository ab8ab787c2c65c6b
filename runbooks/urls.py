from django.urls import path

from runbooks import api, views

urlpatterns = [
    path("", views.note_list, name="runbook-list"),
    path("new/", views.note_create, name="runbook-create"),
    path("<slug:slug>/", views.note_detail, name="runbook-detail"),
    path("<slug:slug>/edit/", views.note_edit, name="runbook-edit"),
    path("<slug:slug>/history/", views.note_history, name="runbook-history"),
    path("<slug:slug>/history/<int:version>/", views.note_revision, name="runbook-revision"),
]

# Mounted under /api/runbooks/ (DRF answers 401/403 itself, no login redirect).
api_urlpatterns = [
    path("", api.NoteList.as_view(), name="api-runbooks"),
]
