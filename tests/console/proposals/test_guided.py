"""The guided proposal form: host search, only the chosen host's cards, the advisor's KV
figure, and the what-if dry run that keeps nothing."""

import math

import pytest

from console.core.models import AuditEntry
from console.proposals import progress, services
from console.proposals.gates import Gate, GateOutcome, GateStatus
from console.proposals.models import GateResult, Proposal
from inventory.models import Host
from tests.console.proposals.support import create_proposal, outcomes, ready_proposal, seed_host
from tests.factories import GIB, GpuFactory, HostFactory, ServedModelFactory

pytestmark = pytest.mark.django_db


def guided_data(host, model, **overrides) -> dict:
    data = {
        "action": "add",
        "served_model": model.pk,
        "host": host.name,
        "gpus": [host.gpus.order_by("index").last().pk],
        "card_count": 1,
        "isolation_mode": "gpu_group",
        "kv_reservation_gib": "6",
        "kv_reservation_basis": "p95",
        "kv_tokens_per_request": 4096,
        "expected_p95_concurrency": 10,
        "admission_policy": "queue",
        "canary_share_pct": 10,
        "rollout_steps": 3,
        "rationale": "Summaries for the support desk.",
    }
    return data | overrides


def _cards_of(*hosts):
    for host in hosts:
        for index in range(8):
            GpuFactory(host=host, index=index)


def test_the_form_lists_no_card_until_a_host_is_picked_and_then_only_its_own(client_as):
    hosts = [HostFactory() for _ in range(3)]
    _cards_of(*hosts)
    client = client_as("oncall")
    blank = client.get("/proposals/new/").content.decode()
    assert 'name="gpus"' not in blank
    picked = client.get(f"/proposals/new/?host={hosts[1].name}").content.decode()
    assert picked.count('name="gpus"') == 8
    for gpu in hosts[1].gpus.all():
        assert f'name="gpus" value="{gpu.pk}"' in picked
    assert f'name="gpus" value="{hosts[0].gpus.first().pk}"' not in picked


def test_host_search_shows_each_match_with_its_best_card(client_as):
    for name in ("a100-east-1", "a100-east-2", "h200-west-1"):
        GpuFactory(host=HostFactory(name=name), index=0)
    page = client_as("oncall").get("/proposals/new/hosts/?q=east").content.decode()
    assert "a100-east-1" in page and "a100-east-2" in page
    assert "h200-west-1" not in page
    assert "no recent samples" in page  # nothing measured: unknown, not zero


def test_the_preview_runs_the_four_gates_and_keeps_nothing(client_as):
    host = seed_host()
    model = ServedModelFactory(name="summariser", weights_bytes=6 * GIB)
    audit_before = AuditEntry.objects.count()
    response = client_as("oncall").post("/proposals/new/preview/", guided_data(host, model))
    assert response.status_code == 200
    answer = response.json()
    for gate in ("memory", "kv", "isolation", "load_test"):
        assert f'data-testid="whatif-gate-{gate}"' in answer["whatif"]
    assert answer["whatif"].count('data-testid="placement-diagram"') == 2
    assert "summariser (proposed)" in answer["whatif"]
    assert Proposal.objects.count() == 0
    assert GateResult.objects.count() == 0
    assert AuditEntry.objects.count() == audit_before


def test_a_blank_kv_reservation_takes_the_advisors_figure_with_its_basis(client_as):
    host = seed_host()
    model = ServedModelFactory(name="summariser", weights_bytes=6 * GIB)
    data = guided_data(host, model, kv_reservation_gib="", expected_p95_concurrency=9.2)
    answer = client_as("oncall").post("/proposals/new/preview/", data).json()
    per_token = model.effective_kv_bytes_per_token
    expected = math.ceil(10 * 4096 * per_token * 1.2)  # 9.2 requests round up to 10
    assert answer["kv_recommended_gib"] == f"{expected / GIB:.3f}"
    assert "10 requests x 4,096 tokens" in answer["kv_basis"]

    client_as("oncall").post("/proposals/new/", data)
    assert Proposal.objects.get().kv_reservation_bytes == round(
        float(answer["kv_recommended_gib"]) * GIB
    )


def test_without_an_advisor_basis_the_reservation_must_be_given(client_as):
    host = seed_host()
    model = ServedModelFactory(name="summariser")
    data = guided_data(host, model, kv_reservation_gib="", expected_p95_concurrency="")
    response = client_as("oncall").post("/proposals/new/", data)
    assert response.status_code == 200
    assert "the advisor has no basis" in str(response.context["form"].errors)
    assert Proposal.objects.count() == 0


def test_the_solver_choice_is_previewed_with_the_cards_it_would_take(client_as):
    host = seed_host()
    model = ServedModelFactory(name="summariser", weights_bytes=6 * GIB)
    data = guided_data(host, model, gpus=[], let_solver_choose="on")
    answer = client_as("oncall").post("/proposals/new/preview/", data).json()
    assert "The solver would choose a100-node:" in answer["whatif"]
    assert Proposal.objects.count() == 0


def test_without_javascript_the_preview_button_redraws_the_page_with_the_what_if(client_as):
    host = seed_host()
    model = ServedModelFactory(name="summariser", weights_bytes=6 * GIB)
    data = guided_data(host, model) | {"preview": "1"}
    response = client_as("oncall").post("/proposals/new/", data)
    page = response.content.decode()
    assert response.status_code == 200
    assert 'data-testid="whatif-gate-memory"' in page
    assert Proposal.objects.count() == 0


def test_without_javascript_a_host_is_found_and_picked_by_buttons(client_as):
    host = seed_host()
    HostFactory(name="b200-node")
    client = client_as("oncall")
    found = client.post("/proposals/new/", {"host": "a100", "find_host": "1"}).content.decode()
    assert 'value="a100-node"' in found and "b200-node" not in found
    picked = client.post("/proposals/new/", {"host": "a100", "pick_host": "a100-node"})
    assert picked.content.decode().count('name="gpus"') == host.gpus.count()


@pytest.mark.parametrize(
    "hostile",
    [
        {"host": "no-such-host", "served_model": "x"},
        {"host": "a100-node", "served_model": "999999", "gpus": ["abc"], "card_count": "-3"},
        {"host": "h" * 5000, "kv_reservation_gib": "1e309", "isolation_mode": "bogus"},
    ],
)
def test_hostile_previews_answer_with_reasons_not_errors(client_as, hostile):
    seed_host()
    response = client_as("oncall").post("/proposals/new/preview/", hostile)
    assert response.status_code == 200
    assert "The what-if shows once the form says" in response.json()["whatif"]
    assert Proposal.objects.count() == 0


def test_an_edit_previews_against_the_stored_proposal_without_changing_it(client_as, personas):
    host = seed_host()
    model = ServedModelFactory(name="summariser", weights_bytes=6 * GIB)
    client = client_as("oncall")
    client.post("/proposals/new/", guided_data(host, model))
    proposal = Proposal.objects.get()
    data = guided_data(host, model, kv_reservation_gib="9")
    answer = client.post(f"/proposals/{proposal.pk}/edit/preview/", data).json()
    assert 'data-testid="whatif-gate-kv"' in answer["whatif"]
    proposal.refresh_from_db()
    assert (proposal.kv_reservation_bytes, proposal.revision) == (6 * GIB, 1)
    assert Host.objects.count() == 1


def test_the_status_shows_each_gate_as_it_finishes_then_the_stored_results(client_as, personas):

    proposal = create_proposal(personas["oncall"])
    services.do_submit(proposal, acting_user=personas["oncall"])
    services.do_start_checks(proposal.pk, proposal.revision)
    progress.started(proposal.pk, proposal.revision)
    progress.finished(
        proposal.pk, proposal.revision, GateOutcome(Gate.MEMORY, GateStatus.PASS, "fits")
    )
    client = client_as("approver")
    running = client.get(f"/proposals/{proposal.pk}/status/").json()
    assert running["running"] and running["state"] == "checking"
    assert [g["status"] for g in running["gates"]] == ["pass"] + ["waiting"] * (len(Gate) - 1)
    page = client.get(f"/proposals/{proposal.pk}/").content.decode()
    assert 'data-testid="gate-progress"' in page

    services.do_record_gate_results(proposal.pk, proposal.revision, outcomes(failing=(Gate.KV,)))
    done = client.get(f"/proposals/{proposal.pk}/status/").json()
    assert not done["running"] and done["version"] != running["version"]
    assert [g["status"] for g in done["gates"]] == [
        "fail" if g is Gate.KV else "pass" for g in Gate
    ]


def test_the_inbox_serves_its_rows_alone_for_its_poll(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    rows = client_as("approver").get("/proposals/inbox/?partial=1").content.decode()
    assert f'data-proposal="{proposal.pk}"' in rows
    assert "<html" not in rows
