"""Dead letters: kept with their reason, shown to on-call, replayed once fixed, or discarded."""

import importlib
import time

import pytest
from django.apps import apps
from django.core.management import CommandError, call_command

from console.core.models import AuditEntry
from console.core.reason_text import render_in
from inventory.ingest.worker import IngestWorker
from inventory.models import CardSample, DeadLetter, Host, IngestedBatch
from inventory.services import AlreadyResolved, do_discard_dead_letter, do_replay_dead_letter
from inventory.wire import signing
from inventory.wire.schema import BatchRejected, Window, check_batch
from tests.batches import GIB, batch, card_row
from tests.factories import GpuFactory

pytestmark = pytest.mark.django_db


class _Message:
    def __init__(self, headers=None):
        self.headers = headers or {}

    def ack(self):
        pass


def _dead_letter_for_a_host_not_yet_registered():
    """What the worker keeps when a new host's agent starts before anyone registered it."""
    gpu = GpuFactory()
    now = time.time()
    payload = batch(gpu.host, start=now - 10, end=now,
                    cards=[card_row(gpu, used_max=3 * GIB, used_last=GIB)])  # fmt: skip
    payload["host"] = "gpu-new"
    # Signed with the secret the host will be registered with (the agent holds it already).
    body = signing.encode(payload)
    worker = IngestWorker(connection=None, max_wait_s=0)
    worker.add(body, _Message({signing.HEADER: signing.sign(gpu.host.agent_secret, body)}))
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


ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}
UNKNOWN_HOST_EN = "unknown host 'gpu-new': register it in the inventory first"
UNKNOWN_HOST_ZH = "未知主机 'gpu-new'：请先在资产清单中登记"


def test_a_rejection_is_kept_as_a_code_and_reads_in_either_language(client_as):
    letter, _ = _dead_letter_for_a_host_not_yet_registered()
    assert (letter.reason_code, letter.reason) == ("unknown_host", UNKNOWN_HOST_EN)
    assert letter.reason_message == {
        "code": "batch_rejected.unknown_host.unknown_host",
        "params": {"host": "'gpu-new'"},
    }
    for path in ("/ingest/dead-letters/", f"/ingest/dead-letters/{letter.pk}/"):
        english = client_as("oncall").get(path).content.decode()
        chinese = client_as("oncall").get(path, **ZH).content.decode()
        assert UNKNOWN_HOST_EN.replace("'", "&#x27;") in english, path
        assert UNKNOWN_HOST_ZH.replace("'", "&#x27;") in chinese, path
        assert "register it" not in chinese and "unknown_host" in chinese, path


def test_a_replay_that_fails_again_says_why_in_the_readers_language(client_as):
    letter, _ = _dead_letter_for_a_host_not_yet_registered()
    client = client_as("oncall")
    response = client.post(f"/ingest/dead-letters/{letter.pk}/replay/", follow=True, **ZH)
    (said,) = [str(message) for message in response.context["messages"]]
    assert said.endswith(f"host: {UNKNOWN_HOST_ZH}"), said
    letter.refresh_from_db()
    assert letter.reason_message["code"] == "batch_rejected.unknown_host.unknown_host"


def test_a_value_of_the_wrong_kind_names_its_kind_in_either_language():
    window = Window.around(time.time(), retention_s=3600, skew_s=60)
    now = time.time()
    gpu_batch = {**batch(GpuFactory.build().host, start=now - 10, end=now), "cards": {"index": 0}}
    with pytest.raises(BatchRejected) as rejected:
        check_batch(gpu_batch, window)
    assert (rejected.value.code, rejected.value.path) == ("bad_type", "cards")
    assert rejected.value.message == "expected a list, got an object"
    assert render_in(rejected.value.reason(), "en") == "expected a list, got an object"
    assert render_in(rejected.value.reason(), "zh-hans") == "应为列表，实际为对象"


migration = importlib.import_module("inventory.migrations.0021_dead_letter_reason_message")


@pytest.mark.parametrize(
    ("code", "stored", "chinese"),
    [
        ("unknown_host", UNKNOWN_HOST_EN, UNKNOWN_HOST_ZH),
        ("bad_type", "expected a list, got an object", "应为列表，实际为对象"),
        ("bad_type", "expected a number, got int", "应为数字，实际为整数"),
        ("bad_uuid", "expected a number, got int", None),  # not a message bad_uuid has
        ("out_of_range", "70000 is outside [0, 32767]", "70000 超出 [0, 32767]"),
        ("out_of_range", "a number of 40 digits is outside [0, 1.12590e+15]", None),
        ("too_deep", "nested more than 8 levels", "嵌套超过 8 层"),
        ("undecodable", "Error -3 while decompressing data", "Error -3 while decompressing data"),
        ("duplicate", "PID 456 twice on card GPU-1", "PID 456 在卡 GPU-1 上出现两次"),
        ("unknown_host", "unknown host 'x'", None),  # a wording from before: kept as it is
        ("unknown_host", "x" * 4000, None),
    ],
)
def test_stored_reasons_become_codes_where_they_read_back_word_for_word(code, stored, chinese):
    letter = DeadLetter.objects.create(body=b"{}", size=2, reason_code=code, reason=stored)
    migration.codes_for_stored_reasons(apps, None)
    letter.refresh_from_db()
    assert render_in(letter.reason_message, "en") == stored
    if chinese is None:
        assert letter.reason_message == {"code": "legacy_text", "params": {"text": stored}}
    else:
        assert letter.reason_message["code"].startswith(f"batch_rejected.{code}.")
        assert render_in(letter.reason_message, "zh-hans") == chinese
