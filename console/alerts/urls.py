from django.urls import path

from console.alerts import api, views

urlpatterns = [
    path("", views.alert_list, name="alert-list"),
    path("<int:pk>/", views.alert_detail, name="alert-detail"),
    path("<int:pk>/acknowledge/", views.alert_acknowledge, name="alert-acknowledge"),
    path("silences/new/", views.silence_create, name="alert-silence-create"),
    path("silences/<int:pk>/end/", views.silence_end, name="alert-silence-end"),
    path("rules/", views.rule_list, name="alert-rule-list"),
    path("rules/<slug:slug>/edit/", views.rule_edit, name="alert-rule-edit"),
]

# Mounted under /api/alerts/.
api_urlpatterns = [
    path("", api.AlertList.as_view(), name="api-alerts"),
]
