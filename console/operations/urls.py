from django.urls import path

from console.operations import api, views

urlpatterns = [
    path("actions/<int:pk>/approve/", views.approve_action, name="host-action-approve"),
    path("actions/<int:pk>/reject/", views.reject_action, name="host-action-reject"),
    path("policies/<int:pk>/revoke/", views.revoke_policy, name="policy-revoke"),
    path("refusals/<int:pk>/clear/", views.clear_refusal, name="card-refusal-clear"),
    path("off-peak/<int:pk>/decide/", views.decide_plan, name="defrag-plan-decide"),
]

host_urlpatterns = [
    path("", views.host_operations, name="host-operations"),
    path("actions/", views.request_action, name="host-action-request"),
    path("policies/", views.sign_policy, name="policy-sign"),
]

# Mounted under /api/host-actions/.
api_urlpatterns = [
    path("", api.HostActionList.as_view(), name="api-host-actions"),
]
