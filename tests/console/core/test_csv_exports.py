"""CSV exports of the audit trail, the fleet board, proposals and events: every visible row,
times in ISO 8601 with the reader's offset, formulas made inert."""

import csv
import datetime as dt
import io
import uuid

import pytest

from console.core.auditing import Action
from console.core.auditing.changes import record
from console.core.models import AuditEntry
from console.core.preferences.models import Preference
from inventory.models import Event
from tests.console.proposals.support import create_proposal
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


def _rows(response) -> list[dict]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_times_carry_the_offset_of_the_readers_zone(client_as, personas):
    host = HostFactory(name="infer-07")
    at = dt.datetime(2026, 1, 15, 9, 30, tzinfo=dt.UTC)
    Event.objects.create(host=host, kind=Event.Kind.OOM, at=at, cause="true_peak",
                         batch_id=uuid.uuid4(), position=0)  # fmt: skip
    Preference.objects.create(user=personas["manager"], time_zone="Asia/Kolkata",
                              time_zone_source="chosen")  # fmt: skip
    rows = _rows(client_as("manager").get("/events/export.csv"))
    assert [(r["host"], r["time"]) for r in rows] == [("infer-07", "2026-01-15T15:00:00+05:30")]
    assert dt.datetime.fromisoformat(rows[0]["time"]) == at


def test_the_audit_export_keeps_its_filter_and_defuses_formulas(client_as, personas):
    host = HostFactory()
    record(actor=personas["oncall"], action=Action.EVENT_ACKNOWLEDGE, obj=host, before=None,
           after={}, comment="=HYPERLINK(\"http://evil\")")  # fmt: skip
    record(actor=personas["oncall"], action=Action.HOST_REGISTER, obj=host, before=None, after={})
    rows = _rows(client_as("manager").get("/audit/export.csv?action=event"))
    assert [r["action"] for r in rows] == ["event.acknowledge"]
    assert rows[0]["comment"].startswith("'=")
    assert AuditEntry.objects.count() >= 2


def test_the_proposal_and_fleet_exports_list_what_the_pages_list(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    GpuFactory(host=HostFactory(name="infer-99"))
    proposals = _rows(client_as("approver").get("/proposals/export.csv"))
    assert [int(r["id"]) for r in proposals] == [proposal.pk]
    assert proposals[0]["state"] == "draft"
    fleet = _rows(client_as("oncall").get("/export.csv"))
    assert {r["host"] for r in fleet} >= {"infer-99", proposal.host.name}
