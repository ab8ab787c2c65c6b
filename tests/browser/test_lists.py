"""A filtered list in a real browser: the filter survives paging."""

import uuid

import pytest
from django.contrib.contenttypes.models import ContentType

from console.core.models import AuditEntry
from console.core.pagination import PAGE_SIZE
from runbooks.models import RunbookNote
from tests.factories import UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"


def test_the_audit_filter_survives_the_next_page(console_page):
    note_type = ContentType.objects.get_for_model(RunbookNote)
    AuditEntry.objects.bulk_create(
        AuditEntry(
            change_id=uuid.uuid4(),
            actor_name="oncall",
            action=action,
            content_type=note_type,
            object_id=str(n),
            object_repr=f"note {n}",
        )
        for n in range(PAGE_SIZE + 2)
        for action in ("runbook.update", "deployment.change")
    )
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    page = console_page("manager")
    page.login("manager", PASSWORD)
    page.open("/audit/")
    page.page.fill("input[name=action]", "runbook")
    page.page.click("form.filters button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    page.page.click("nav.pagination a[rel=next]")
    page.page.wait_for_load_state("networkidle")
    assert "action=runbook" in page.page.url and "page=2" in page.page.url
    assert page.page.input_value("input[name=action]") == "runbook"
    actions = page.page.locator("#audit-table tbody td:nth-child(4)").all_inner_texts()
    assert actions == ["runbook.update"] * 2
    assert "Page 2 of 2" in page.page.locator("nav.pagination").inner_text()
    assert page.errors == []
