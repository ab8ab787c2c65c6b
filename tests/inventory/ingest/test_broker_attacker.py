"""The broker attacker: whoever can publish to the ingest queue, holding no host's secret.

Every kind of host is a target: NVML and simulated, with a secret and without. Each carries a
standing degradation policy where it may, and a tenant a forged 98% would have shrunk. The
attacker sends unsigned batches, batches signed with another host's secret or a key of its
own, bodies changed after signing, another host's batch ids, oversized bodies, replays and a
batch without cards. Nothing of theirs is written, no host action is asked or sent, no
degradation starts, and every refused message is a dead letter with its reason. The control:
the host's own agent, signing the same 98%, does start the degradation.

A host without a secret is the one deliberate gap: an unsigned batch for it cannot be told
from its agent's, so it is written; what stands between it and automation is that nothing
acts on such a host (console.operations refuses it), which is asserted here too.
"""

import time

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from console.operations import messages, services, watch
from console.operations.models import DegradationRun, HostAction, StandingPolicy
from inventory.ingest.worker import IngestWorker
from inventory.models import CardSample, DeadLetter, Host, IngestedBatch
from inventory.wire import signing
from inventory.wire.compression import MAX_BATCH_BYTES
from inventory.wire.schema import REASON_PREFIX
from tests.batches import batch, card_row, process_row
from tests.factories import GIB, DeploymentFactory, GpuFactory, HostFactory, ServedModelFactory

pytestmark = pytest.mark.django_db

TOTAL = 80 * GIB
FORGED = int(0.98 * TOTAL)  # the figure: past DEGRADATION_LIMIT, a run would start
KINDS = {
    "nvml": (Host.Collector.NVML, True),
    "simulated": (Host.Collector.SIMULATED, True),
    "nvml, no secret": (Host.Collector.NVML, False),
    "simulated, no secret": (Host.Collector.SIMULATED, False),
}
WITH_SECRET = [kind for kind, (_, secret) in KINDS.items() if secret]
WITHOUT_SECRET = [kind for kind, (_, secret) in KINDS.items() if not secret]


class _Message:
    def __init__(self, headers):
        self.headers = headers

    def ack(self):
        pass


@pytest.fixture
def fleet(personas):
    """A card per kind of host, each with a priority-3 tenant a degradation would shrink, and
    a standing degradation policy on every host that may hold one."""
    targets = {}
    for number, (kind, (collector, secret)) in enumerate(KINDS.items()):
        host = HostFactory(name=f"victim-{number}", collector=collector)
        if not secret:
            Host.objects.filter(pk=host.pk).update(agent_secret="")
            host.refresh_from_db()
        gpu = GpuFactory(host=host, index=0, memory_total_bytes=TOTAL)
        tenant = DeploymentFactory(
            host=host, gpus=[gpu], runtime_name=f"batch-{number}",
            served_model=ServedModelFactory(priority=3), kv_reservation_bytes=12 * GIB,
        )  # fmt: skip
        if secret:
            services.do_sign_policy(
                acting_user=personas["approver"], host=host, kind=StandingPolicy.Kind.DEGRADATION
            )
        targets[kind] = (gpu, tenant)
    return targets


@pytest.fixture
def sent(monkeypatch):
    """What would have gone to an agent: every host action published."""
    published = []
    monkeypatch.setattr(messages, "publish", published.append)
    return published


def _forged(gpu, tenant, *, used=FORGED, **fields):
    """The tenant's preallocated 12 GiB pool and a job no deployment owns holding the rest:
    the on-demand part past the limit, which the card-memory rule acts on."""
    now = time.time()
    pool = min(12 * GIB, used)
    processes = [process_row(gpu, 4242, used_max=pool, used_last=pool, deployment=tenant)]
    if used > pool:
        processes.append(process_row(gpu, 4343, used_max=used - pool, used_last=used - pool))
    return {
        **batch(
            gpu.host, start=now - 10, end=now,
            cards=[card_row(gpu, used_max=used, used_last=used, total=TOTAL)],
            processes=processes,
        ),
        **fields,
    }  # fmt: skip


def _signed(payload, secret):
    body = signing.encode(payload)
    return body, {signing.HEADER: signing.sign(secret, body)}


def _unsigned(payload):
    return signing.encode(payload), {}


def _publish(*messages_):
    worker = IngestWorker(connection=None, max_wait_s=0)
    for body, headers in messages_:
        worker.add(body, _Message(headers))
    worker.flush()
    return worker


def _react(django_capture_on_commit_callbacks):
    """The operations watch, as beat runs it, with what it commits sent on."""
    with django_capture_on_commit_callbacks(execute=True):
        watch.watch(timezone.now())


def _assert_dead_letters(expected: list[str]) -> None:
    """One dead letter per refused message, each with its code and its stored reason."""
    letters = list(DeadLetter.objects.order_by("pk"))
    assert [letter.reason_code for letter in letters] == expected
    for letter in letters:
        assert letter.reason and letter.reason_message["code"].startswith(REASON_PREFIX)


def _assert_nothing_acted(sent) -> None:
    assert not DegradationRun.objects.exists()
    assert not HostAction.objects.exists()
    assert sent == []


@pytest.mark.parametrize("kind", WITH_SECRET)
def test_no_word_but_the_hosts_own_moves_a_host_with_a_secret(
    kind, fleet, sent, django_capture_on_commit_callbacks
):
    gpu, tenant = fleet[kind]
    other_gpu, _ = next(target for name, target in fleet.items() if name != kind)
    tampered_body, tampered_headers = _signed(_forged(gpu, tenant, used=GIB), gpu.host.agent_secret)
    worker = _publish(
        _unsigned(_forged(gpu, tenant)),
        _signed(_forged(gpu, tenant), other_gpu.host.agent_secret or "another-hosts-key"),
        _signed(_forged(gpu, tenant), "a-key-of-the-attackers-own"),
        (tampered_body.replace(b'"used_bytes_last":%d' % GIB, b'"used_bytes_last":%d' % FORGED),
         tampered_headers),
        (signing.encode(_forged(gpu, tenant)), {signing.HEADER: "hmac-sha256=" + "0" * 64}),
    )  # fmt: skip
    assert worker.written == 0 and not CardSample.objects.exists()
    _assert_dead_letters(["unsigned"] + ["bad_signature"] * 4)
    _react(django_capture_on_commit_callbacks)
    _assert_nothing_acted(sent)

    # The control: the same figure from the host's own agent starts the policy's plan.
    assert _publish(_signed(_forged(gpu, tenant), gpu.host.agent_secret)).written == 1
    _react(django_capture_on_commit_callbacks)
    run = DegradationRun.objects.get()
    assert (run.gpu, run.used_before_bytes) == (gpu, FORGED)
    assert [action.action for action in sent] == ["reload_with"]


@pytest.mark.parametrize("kind", WITHOUT_SECRET)
def test_a_host_without_a_secret_is_never_acted_on(
    kind, fleet, sent, personas, django_capture_on_commit_callbacks, client_as
):
    gpu, tenant = fleet[kind]
    secret_holder, _ = fleet["nvml"]
    worker = _publish(_signed(_forged(gpu, tenant), secret_holder.host.agent_secret))
    assert worker.written == 0
    _assert_dead_letters(["bad_signature"])
    assert DeadLetter.objects.get().reason_message["code"].endswith("no_secret")

    # Unsigned, it cannot be told from its own agent's batch: written, and acted on by nothing.
    assert _publish(_unsigned(_forged(gpu, tenant))).written == 1
    _react(django_capture_on_commit_callbacks)
    _assert_nothing_acted(sent)
    with pytest.raises(ValidationError, match="no secret"):
        services.do_sign_policy(
            acting_user=personas["approver"], host=gpu.host, kind=StandingPolicy.Kind.DEGRADATION
        )
    with pytest.raises(ValidationError, match="no secret"):
        services.do_request_action(
            acting_user=personas["oncall"], host=gpu.host, action="restart", deployment=tenant
        )
    assert not StandingPolicy.objects.filter(host=gpu.host).exists()
    for path in (f"/hosts/{gpu.host.name}/", f"/hosts/{gpu.host.name}/operations/"):
        assert b'id="no-secret"' in client_as("oncall").get(path).content, path


def test_an_action_asked_while_the_host_held_a_secret_is_not_sent_after_it_lost_it(
    fleet, sent, personas, django_capture_on_commit_callbacks
):
    gpu, tenant = fleet["nvml"]
    asked = services.do_request_action(
        acting_user=personas["oncall"], host=gpu.host, action="restart", deployment=tenant
    )
    Host.objects.filter(pk=gpu.host.pk).update(agent_secret="")
    asked.host.refresh_from_db()
    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(services.OperationError, match="no secret"),
    ):
        services.do_approve_action(asked, acting_user=personas["approver"])
    asked.refresh_from_db()
    assert asked.state == HostAction.State.AWAITING_APPROVAL and sent == []


def test_another_hosts_batch_id_is_a_dead_letter_not_a_silent_drop(fleet):
    (a, a_tenant), (b, b_tenant) = fleet["nvml"], fleet["simulated"]
    first = _forged(a, a_tenant, used=GIB)
    assert _publish(_signed(first, a.host.agent_secret)).written == 1
    # B's agent, or anyone holding B's secret, reuses A's id: before and in the same group.
    clash = _forged(b, b_tenant, used=GIB, batch_id=first["batch_id"])
    later = _forged(a, a_tenant, used=2 * GIB)
    same_group = _forged(b, b_tenant, used=GIB, batch_id=later["batch_id"])
    worker = _publish(
        _signed(clash, b.host.agent_secret),
        _signed(later, a.host.agent_secret),
        _signed(same_group, b.host.agent_secret),
    )
    assert worker.written == 1
    _assert_dead_letters(["batch_id_clash", "batch_id_clash"])
    assert {letter.host_name for letter in DeadLetter.objects.all()} == {b.host.name}
    assert not CardSample.objects.filter(gpu=b).exists()
    assert CardSample.objects.filter(gpu=a).count() == 2
    assert set(IngestedBatch.objects.values_list("host_id", flat=True)) == {a.host_id}


def test_oversized_bodies_and_batches_without_cards_are_refused_signed_or_not(fleet):
    gpu, tenant = fleet["simulated"]
    secret = gpu.host.agent_secret
    padded = _forged(gpu, tenant, driver_version="5" * 64)
    huge = signing.encode(padded).replace(b'"polls":10', b'"polls":10' + b" " * MAX_BATCH_BYTES)
    cardless = _forged(gpu, tenant)
    del cardless["cards"]
    worker = _publish(
        (huge, {signing.HEADER: signing.sign(secret, huge)}),
        (huge, {}),
        _signed(cardless, secret),
        _signed({**_forged(gpu, tenant), "cards": None}, secret),
    )
    assert worker.written == 0 and not CardSample.objects.exists()
    _assert_dead_letters(["too_large", "too_large", "missing", "missing"])
    paths = DeadLetter.objects.filter(reason_code="missing").values_list("reason_path", flat=True)
    assert set(paths) == {"cards"}


def test_a_replay_writes_nothing_again_and_a_doctored_or_stale_one_is_a_dead_letter(
    fleet, sent, django_capture_on_commit_callbacks
):
    gpu, tenant = fleet["nvml"]
    secret = gpu.host.agent_secret
    genuine = _signed(_forged(gpu, tenant, used=GIB), secret)
    assert _publish(genuine).written == 1
    long_ago = time.time() - 60 * 86400
    stale = _forged(gpu, tenant, interval_start=long_ago - 10, interval_end=long_ago)
    body, headers = genuine
    worker = _publish(
        genuine,  # the same message again: a redelivery, written once already
        (body.replace(b'"used_bytes_last":%d' % GIB, b'"used_bytes_last":%d' % FORGED), headers),
        _signed(stale, secret),  # a captured batch from long ago, its signature still sound
    )
    assert worker.written == 0
    assert CardSample.objects.count() == IngestedBatch.objects.count() == 1
    _assert_dead_letters(["bad_signature", "too_old"])
    _react(django_capture_on_commit_callbacks)
    _assert_nothing_acted(sent)
