"""What a guided proposal replaces: only the chosen host's running deployments are offered,
create and edit store the choice (audited), and the what-if counts the replaced as leaving:
the field report's switch of time-shared replicas to a card group."""

import pytest
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import ValidationError

from console.core.models import AuditEntry
from console.proposals import services, whatif
from console.proposals.gates import Gate
from console.proposals.models import Proposal
from inventory.models import Deployment
from tests.console.proposals.support import create_proposal, proposal_fields, shared_host
from tests.console.proposals.test_guided import guided_data
from tests.factories import GIB, DeploymentFactory, GpuFactory, ServedModelFactory

pytestmark = pytest.mark.django_db


def group_data(host, gpus, **overrides) -> dict:
    model = ServedModelFactory(name="chat-group", weights_bytes=140 * GIB)
    return guided_data(host, model, gpus=[gpu.pk for gpu in gpus], **overrides)


def test_the_choice_offers_only_the_hosts_running_deployments(client_as):
    host, gpus, replicas = shared_host()
    stopped = DeploymentFactory(host=host, gpus=[gpus[0]], status=Deployment.Status.STOPPED)
    elsewhere = DeploymentFactory(gpus=[GpuFactory()])
    client = client_as("oncall")
    assert 'name="replaces"' not in client.get("/proposals/new/").content.decode()
    page = client.get(f"/proposals/new/?host={host.name}").content.decode()
    for replica in replicas:
        assert f'name="replaces" value="{replica.pk}"' in page
    assert f'value="{stopped.pk}"' not in page.split('data-testid="replaces"')[1]
    assert f'name="replaces" value="{elsewhere.pk}"' not in page
    assert page.count('name="replaces"') == len(replicas)
    assert f"chat #{replicas[1].pk} · card 1 · Time-slicing" in page


def test_the_host_picked_without_javascript_brings_its_deployments(client_as):
    host, _gpus, replicas = shared_host()
    page = (
        client_as("oncall")
        .post("/proposals/new/", {"host": "h100", "pick_host": host.name})
        .content.decode()
    )
    assert page.count('name="replaces"') == len(replicas)


def test_a_deployment_of_another_host_is_refused_with_a_form_error(client_as):
    host, gpus, _replicas = shared_host()
    elsewhere = DeploymentFactory(gpus=[GpuFactory()])
    client = client_as("oncall")
    data = group_data(host, gpus, replaces=[elsewhere.pk])
    response = client.post("/proposals/new/", data)
    assert response.status_code == 200
    errors = response.context["form"].errors["replaces"]
    assert errors == [
        f"Only running deployments of {host.name}, other than the one it changes, can be "
        f"replaced: {elsewhere}."
    ]
    assert 'data-testid="replaces-error"' in response.content.decode()
    assert Proposal.objects.count() == 0
    preview = client.post("/proposals/new/preview/", data)
    assert preview.status_code == 200
    assert "can be replaced" in preview.json()["whatif"]


def _audit_rows(proposal, action):
    return AuditEntry.objects.filter(
        content_type=ContentType.objects.get_for_model(Proposal),
        object_id=str(proposal.pk),
        action=action,
    )


def test_create_and_edit_store_what_it_replaces_with_their_audit_rows(client_as):
    host, gpus, replicas = shared_host()
    client = client_as("oncall")
    created = client.post("/proposals/new/", group_data(host, gpus, replaces=[replicas[0].pk]))
    assert created.status_code == 302
    proposal = Proposal.objects.get()
    assert list(proposal.replaces.all()) == [replicas[0]]
    assert _audit_rows(proposal, "proposal.create").get().after["replaces"] == [replicas[0].pk]

    form = client.get(f"/proposals/{proposal.pk}/edit/").content.decode()
    assert f'name="replaces" value="{replicas[0].pk}" id="id_replaces_0" checked' in form
    every = [replica.pk for replica in replicas]
    edited = client.post(f"/proposals/{proposal.pk}/edit/", group_data(host, gpus, replaces=every))
    assert edited.status_code == 302
    proposal.refresh_from_db()
    assert sorted(proposal.replaces.values_list("pk", flat=True)) == every
    edit = _audit_rows(proposal, "proposal.edit").get()
    assert (edit.before["replaces"], edit.after["replaces"]) == ([replicas[0].pk], every)

    detail = client.get(f"/proposals/{proposal.pk}/").content.decode()
    replaced = detail.split('data-testid="replaces">')[1].split("</dd>")[0]
    assert f"chat #{replicas[3].pk} · {host.name}:3 · Time-slicing" in replaced


def test_an_edit_through_the_service_refuses_a_deployment_of_another_host(personas):
    host, gpus, replicas = shared_host()
    proposal = create_proposal(personas["oncall"], host=host, gpus=gpus, replaces=replicas[:1])
    with pytest.raises(ValidationError, match="can be replaced"):
        services.do_edit_proposal(
            proposal, acting_user=personas["oncall"], replaces=[DeploymentFactory()]
        )
    assert list(proposal.replaces.all()) == replicas[:1]


def _gate(answer: dict, gate: Gate) -> str:
    fragment = answer["whatif"]
    start = fragment.index(f'data-testid="whatif-gate-{gate.value}"')
    return fragment[fragment.rindex("<div", 0, start) : start]


def test_a_group_on_the_replicas_cards_fits_only_when_it_replaces_them(client_as):
    host, gpus, replicas = shared_host()
    client = client_as("oncall")
    alone = client.post("/proposals/new/preview/", group_data(host, gpus)).json()
    assert "gate-fail" in _gate(alone, Gate.MEMORY)
    assert "gate-fail" in _gate(alone, Gate.ISOLATION)  # a group beside time-shared tenants

    data = group_data(host, gpus, replaces=[replica.pk for replica in replicas])
    switched = client.post("/proposals/new/preview/", data).json()
    assert "gate-pass" in _gate(switched, Gate.MEMORY)
    assert "gate-pass" in _gate(switched, Gate.ISOLATION)
    # Nothing kept: no proposal, and the replicas still run.
    assert Proposal.objects.count() == 0
    assert not Deployment.objects.filter(pk__in=[r.pk for r in replicas], status="stopped")


def test_the_what_if_drawing_takes_the_replaced_off_their_cards(personas):
    host, gpus, replicas = shared_host()
    proposal = Proposal(
        author=personas["oncall"],
        served_model=ServedModelFactory(name="chat-group", weights_bytes=140 * GIB),
        host=host,
        **proposal_fields(),
    )
    result = whatif.dry_run(proposal, gpus, replicas[:2])
    before = {name for name, _mib in result.before.models}
    after = {name for name, _mib in result.after.models}
    kept = {f"chat #{replica.pk}" for replica in replicas[2:]}
    assert {f"chat #{replica.pk}" for replica in replicas} <= before
    assert after & {f"chat #{replica.pk}" for replica in replicas} == kept
    assert any(name.endswith("(proposed)") for name in after)
    assert Proposal.objects.count() == 0


def test_a_console_load_test_leaves_out_the_replicas_the_change_replaces(personas):
    from console.proposals.loadtest import inputs as loadtest_inputs

    host, gpus, replicas = shared_host()
    Deployment.objects.filter(host=host).update(endpoint_url="http://127.0.0.1:9/v1")
    proposal = create_proposal(
        personas["oncall"], host=host, gpus=gpus[:2], replaces=replicas[:1],
        expected_request_rate=3.0,
    )  # fmt: skip
    plan = loadtest_inputs.plan_for_proposal(
        proposal, endpoint_url="http://127.0.0.1:9/v1", rates={r.pk: 1.0 for r in replicas}
    )
    # The replica on card 1 stays and shares the group's cards; the one on card 0 is stopped
    # when the change is applied, so the test does not send it traffic.
    assert [t.deployment_id for t in plan.targets] == [replicas[1].pk, None]
    assert plan.targets[-1].rate_rps == 3.0
