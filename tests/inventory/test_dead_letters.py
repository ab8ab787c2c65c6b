"""Dead letters: kept with their reason, shown to on-call, replayed once fixed, or discarded."""

import time

import orjson
import pytest
from django.core.management import CommandError, call_command

from console.models import AuditEntry
from inventory.models import CardSample, DeadLetter, Host, IngestedBatch
from inventory.services import AlreadyResolved, do_discard_dead_letter, do_replay_dead_letter
from inventory.timeseries.ingest_worker import IngestWorker
from tests.batches import GIB, batch, card_row
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db


class _Message:
    def ack(self):
        pass


def _dead_letter_for_a_host_not_yet_registered():
    """What the worker keeps when a new host's agent starts before anyone registered it."""
    gpu = GpuFactory()
    now = time.time()
    payload = batch(gpu.host, start=now - 10, end=now,
                    cards=[card_row(gpu, used_max=3 * GIB, used_last=GIB)])  # fmt: skip
    payload["host"] = "gpu-new"
    worker = IngestWorker(connection=None, max_wait_s=0)
    worker.add(orjson.dumps(payload), _Message())
    worker.flush()
    return DeadLetter.objects.get(), gpu


def test_a_fixed_dead_letter_replays_once(personas):
    letter, gpu = _dead_letter_for_a_host_not_yet_registered()
    assert (letter.reason_code, letter.host_name) == ("unknown_host", "gpu-new")
    assert do_replay_dead_letter(letter, acting_user=personas["oncall"]).code == "unknown_host"
    letter.refresh_from_db()
    assert (letter.status, letter.replays) == (DeadLetter.Status.PENDING, 1)

    gpu.host.name = "gpu-new"  # the fix: the host is registered under the name it reports
    gpu.host.save()
    assert do_replay_dead_letter(letter, acting_user=personas["oncall"]) is None
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.REPLAYED
    assert letter.resolved_by == personas["oncall"]
    assert CardSample.objects.filter(gpu=gpu).count() == 1
    with pytest.raises(AlreadyResolved):
        do_replay_dead_letter(letter, acting_user=personas["oncall"])
    assert IngestedBatch.objects.count() == 1
    trail = AuditEntry.objects.filter(action="dead_letter.replay").order_by("at", "pk")
    assert [entry.after["status"] for entry in trail] == ["pending", "replayed"]
    assert all("body" not in entry.after for entry in trail), "the message stays off the trail"


def test_a_discarded_dead_letter_is_kept_and_audited_with_the_reason_given(personas):
    letter, _ = _dead_letter_for_a_host_not_yet_registered()
    do_discard_dead_letter(letter, acting_user=personas["approver"], comment="test host")
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.DISCARDED
    entry = AuditEntry.objects.get(action="dead_letter.discard")
    assert (entry.actor_name, entry.comment) == ("approver", "test host")
    with pytest.raises(AlreadyResolved):
        do_discard_dead_letter(letter, acting_user=personas["approver"])


def test_the_page_shows_the_reason_and_the_message_and_hides_replay_from_managers(client_as):
    letter, _ = _dead_letter_for_a_host_not_yet_registered()
    listing = client_as("manager").get("/ingest/dead-letters/")
    assert letter in listing.context["page"]
    detail = client_as("manager").get(f"/ingest/dead-letters/{letter.pk}/")
    assert b"unknown_host" in detail.content and b"gpu-new" in detail.content
    assert b"Replay</button>" not in detail.content
    assert b"Replay</button>" in client_as("oncall").get(detail.wsgi_request.path).content
    done = client_as("oncall").post(f"/ingest/dead-letters/{letter.pk}/discard/")
    assert done.status_code == 302
    assert not client_as("oncall").get("/ingest/dead-letters/").context["page"].object_list
    everything = client_as("oncall").get("/ingest/dead-letters/", {"status": "all"})
    assert [row.pk for row in everything.context["page"]] == [letter.pk]


def test_a_message_that_is_not_json_shows_as_text_with_its_nul_bytes_escaped(client_as):
    worker = IngestWorker(connection=None, max_wait_s=0)
    worker.add(b'{"host": "a\x00b", broken', _Message())
    worker.flush()
    letter = DeadLetter.objects.get()
    assert letter.reason_code == "not_json"
    page = client_as("oncall").get(f"/ingest/dead-letters/{letter.pk}/")
    assert page.status_code == 200
    assert "a\\x00b" in page.context["shown"]


def test_the_command_lists_replays_and_discards(capsys):
    letter, gpu = _dead_letter_for_a_host_not_yet_registered()
    call_command("dead_letters", "list")
    assert "unknown_host" in capsys.readouterr().out
    with pytest.raises(CommandError, match="failed again"):
        call_command("dead_letters", "replay", "--all")
    Host.objects.filter(pk=gpu.host.pk).update(name="gpu-new")
    call_command("dead_letters", "replay", str(letter.pk))
    assert f"{letter.pk}: written" in capsys.readouterr().out
    with pytest.raises(CommandError, match="no dead letter 999"):
        call_command("dead_letters", "discard", "999")
    with pytest.raises(CommandError, match="ids, or --all"):
        call_command("dead_letters", "discard")
    assert AuditEntry.objects.filter(action="dead_letter.replay", actor_name="system").exists()
