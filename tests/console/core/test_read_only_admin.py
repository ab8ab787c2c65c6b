"""Records that change only through the console's audited actions are shown by the admin,
never added, changed or deleted there (even by a superuser)."""

import pytest
from django.contrib import admin

from console.alerts.models import Alert
from console.core.admin import ReadOnlyAdmin
from console.core.auditing.models import AuditEntry
from console.operations.models import HostAction
from console.proposals.models import Proposal
from runbooks.models import RunbookNote
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db

READ_ONLY = [AuditEntry, Alert, HostAction, Proposal, RunbookNote]


@pytest.mark.parametrize("model", READ_ONLY, ids=lambda m: m._meta.label)
def test_the_admin_lists_but_does_not_add(admin_client, model):
    assert isinstance(admin.site.get_model_admin(model), ReadOnlyAdmin)
    opts = model._meta
    assert admin_client.get(f"/admin/{opts.app_label}/{opts.model_name}/").status_code == 200
    assert admin_client.get(f"/admin/{opts.app_label}/{opts.model_name}/add/").status_code == 403


def test_a_host_action_opens_read_only(admin_client):
    gpu = GpuFactory(index=0)
    asked = HostAction.objects.create(
        host=gpu.host, action="restart", state=HostAction.State.AWAITING_APPROVAL
    )
    page = admin_client.get(f"/admin/operations/hostaction/{asked.pk}/change/")
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    deleted = admin_client.post(f"/admin/operations/hostaction/{asked.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 403
    assert HostAction.objects.filter(pk=asked.pk).exists()
