"""Batches signed by their host: the agent signs, ingest checks, forgeries become dead letters."""

import stat
import time

import orjson
import pytest
from django.core.management import call_command
from kombu import Connection

from console.core.models import AuditEntry
from inventory.agent.secrets import read_secrets
from inventory.agent.transport import INGEST_QUEUE, batch_publisher
from inventory.ingest.worker import IngestWorker
from inventory.models import CardSample, DeadLetter, Host
from inventory.services import do_replay_dead_letter, do_rotate_agent_secret
from inventory.wire import signing
from tests.batches import GIB, batch, card_row
from tests.factories import GpuFactory, HostFactory

pytestmark = pytest.mark.django_db


class _Message:
    def __init__(self, headers=None):
        self.headers = headers or {}
        self.acked = False

    def ack(self):
        self.acked = True


@pytest.fixture
def real_host():
    """A host collected through NVML: its batches must carry its signature."""
    return GpuFactory(host=HostFactory(name="gpu-07", collector=Host.Collector.NVML))


def _payload(gpu, **fields):
    now = time.time()
    return {**batch(gpu.host, start=now - 10, end=now,
                    cards=[card_row(gpu, used_max=GIB, used_last=GIB)]), **fields}  # fmt: skip


def _ingest(*messages):
    worker = IngestWorker(connection=None, max_wait_s=0)
    for body, headers in messages:
        worker.add(body, _Message(headers))
    worker.flush()
    return worker


def _signed(payload, secret):
    body = signing.encode(payload)
    return body, {signing.HEADER: signing.sign(secret, body)}


def test_a_batch_signed_by_its_host_lands(real_host):
    worker = _ingest(_signed(_payload(real_host), real_host.host.agent_secret))
    assert worker.written == 1 and not DeadLetter.objects.exists()


@pytest.mark.parametrize(
    ("forge", "code"),
    [
        (lambda body, headers, secret: (body, {}), "unsigned"),
        (lambda body, headers, secret: _signed(orjson.loads(body), "not-the-secret"),
         "bad_signature"),
        (lambda body, headers, secret: (body.replace(b'"samples":10', b'"samples":11'), headers),
         "bad_signature"),
        (lambda body, headers, secret: (body, {signing.HEADER: "md5=abc"}), "bad_signature"),
        (lambda body, headers, secret: (body, {signing.HEADER: 7}), "unsigned"),
    ],
)  # fmt: skip
def test_a_forged_or_changed_batch_is_a_dead_letter(real_host, forge, code):
    secret = real_host.host.agent_secret
    body, headers = _signed(_payload(real_host), secret)
    _ingest(forge(body, headers, secret))
    assert DeadLetter.objects.get().reason_code == code
    assert not CardSample.objects.exists()


def test_one_host_cannot_write_for_another(real_host):
    other = GpuFactory(host=HostFactory(name="gpu-08", collector=Host.Collector.NVML))
    claim = _payload(other)  # gpu-08's batch, signed with gpu-07's secret
    _ingest(_signed(claim, real_host.host.agent_secret))
    assert DeadLetter.objects.get().reason_code == "bad_signature"


def test_the_secret_decides_not_the_collector_and_the_check_can_be_turned_off(real_host, settings):
    simulated = GpuFactory()  # the demo fleet's hosts hold secrets as real ones do
    assert _ingest((signing.encode(_payload(simulated)), {})).written == 0
    assert DeadLetter.objects.get().reason_code == "unsigned"
    payload = _payload(simulated)
    assert _ingest(_signed(payload, simulated.host.agent_secret)).written == 1
    settings.INGEST_REQUIRE_SIGNATURE = False
    assert _ingest((signing.encode(_payload(real_host)), {})).written == 1


def test_a_forged_dead_letter_stays_refused_when_replayed(real_host, personas):
    _ingest(_signed(_payload(real_host), "stolen?"))
    letter = DeadLetter.objects.get()
    assert do_replay_dead_letter(letter, acting_user=personas["oncall"]).code == "bad_signature"
    assert not CardSample.objects.exists()


def test_a_rotated_secret_refuses_the_old_one_and_the_trail_keeps_no_secret(real_host):
    old = real_host.host.agent_secret
    host = do_rotate_agent_secret(real_host.host, acting_user=None)
    assert host.agent_secret != old
    _ingest(_signed(_payload(real_host), old))
    assert DeadLetter.objects.get().reason_code == "bad_signature"
    entry = AuditEntry.objects.get(action="host.rotate_secret")
    assert "agent_secret" in entry.changed_fields
    assert old not in str(entry.before) and host.agent_secret not in str(entry.after)


def test_the_agent_signs_what_it_publishes(real_host, tmp_path):
    (tmp_path / "secret").write_text(real_host.host.agent_secret + "\n")
    with Connection("memory://") as connection:
        publish = batch_publisher(lambda: connection.clone(), read_secrets(tmp_path / "secret"))
        publish(_payload(real_host))
        message = connection.SimpleQueue(INGEST_QUEUE).get(timeout=1)
        assert signing.verify(
            real_host.host.agent_secret, message.body, message.headers[signing.HEADER]
        )
        assert _ingest((message.body, message.headers)).written == 1


def test_an_agent_collecting_several_hosts_reads_a_table_of_secrets(tmp_path):
    (tmp_path / "secrets.json").write_text('{"gpu-07": "a", "gpu-08": "b"}')
    secret_for = read_secrets(tmp_path / "secrets.json")
    assert (secret_for("gpu-07"), secret_for("gpu-08"), secret_for("gpu-09")) == ("a", "b", None)
    assert read_secrets("")("gpu-07") is None
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_secrets(tmp_path / "empty")


def test_registering_a_host_hands_out_its_secret_in_a_private_file(tmp_path, capsys):
    path = tmp_path / "agent" / "secret"
    call_command("register_host", "gpu-09", "--secret-file", str(path))
    host = Host.objects.get(name="gpu-09")
    assert path.read_text().strip() == host.agent_secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert host.agent_secret not in capsys.readouterr().out
    assert host.agent_secret not in str(AuditEntry.objects.get(action="host.register").after)
    call_command("host_secret", "gpu-09", "--rotate", "--output", str(path))
    assert (
        path.read_text().strip()
        == Host.objects.get(name="gpu-09").agent_secret
        != (host.agent_secret)
    )
