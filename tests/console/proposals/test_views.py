"""The pages: list and filters, the inbox, the form, the detail with gates and diagrams."""

import datetime as dt

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from console.core.auditing import Action
from console.core.auditing.changes import record
from console.core.models import AuditEntry
from console.proposals import services
from console.proposals.gates import Gate
from console.proposals.models import LoadTest, Proposal
from console.proposals.transitions import State
from inventory.models import Deployment
from tests.console.proposals.support import (
    LOADTESTS,
    applied_proposal,
    checked,
    create_proposal,
    ready_proposal,
)
from tests.factories import GIB, DeploymentFactory, GpuFactory, ServedModelFactory, UserFactory

pytestmark = pytest.mark.django_db


def form_data(gpu, model, **overrides) -> dict:
    data = {
        "action": "add",
        "served_model": model.pk,
        "host": gpu.host.pk,
        "gpus": [gpu.pk],
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


def test_creating_a_proposal_from_the_form(client_as):
    gpu, model = GpuFactory(), ServedModelFactory()
    response = client_as("oncall").post("/proposals/new/", form_data(gpu, model))
    proposal = Proposal.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/proposals/{proposal.pk}/"
    assert proposal.kv_reservation_bytes == 6 * GIB
    assert list(proposal.gpus.all()) == [gpu]
    assert proposal.state == State.DRAFT


def test_save_and_submit_queues_the_checks(
    client_as, monkeypatch, django_capture_on_commit_callbacks
):
    queued = []
    monkeypatch.setattr(
        "console.proposals.queue.queue_gate_checks", lambda pk, rev: queued.append(pk)
    )
    gpu, model = GpuFactory(), ServedModelFactory()
    with django_capture_on_commit_callbacks(execute=True):
        client_as("oncall").post("/proposals/new/", form_data(gpu, model, submit="1"))
    proposal = Proposal.objects.get()
    assert proposal.state == State.SUBMITTED
    assert queued == [proposal.pk]


def test_the_form_shows_field_errors_and_keeps_what_was_typed(client_as):
    gpu, model = GpuFactory(), ServedModelFactory()
    elsewhere = GpuFactory()
    data = form_data(
        gpu,
        model,
        gpus=[elsewhere.pk],
        isolation_mode="mig",
        mps_active_thread_percentage=50,
        kv_reservation_basis="none",
        rationale="Keep me.",
    )
    response = client_as("oncall").post("/proposals/new/", data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert "A MIG deployment needs its MIG slice." in errors["mig_slice"]
    assert "Only MPS deployments take a thread share." in errors["mps_active_thread_percentage"]
    assert "Say how the KV reservation was sized." in errors["kv_reservation_basis"]
    body = response.content.decode()
    assert "Keep me." in body
    assert 'value="6"' in body
    assert not Proposal.objects.exists()
    response = client_as("oncall").post(
        "/proposals/new/", form_data(gpu, model, gpus=[elsewhere.pk])
    )
    assert f"Not on {gpu.host}: {elsewhere}." in response.context["form"].errors["gpus"]


def test_a_move_takes_model_and_host_from_the_deployment(client_as):
    gpu = GpuFactory()
    target = GpuFactory(host=gpu.host, index=gpu.index + 1)
    deployment = DeploymentFactory(host=gpu.host, gpus=[gpu])
    data = form_data(target, deployment.served_model, action="move", deployment=deployment.pk)
    data.pop("served_model")
    data.pop("host")
    response = client_as("oncall").post("/proposals/new/", data)
    assert response.status_code == 302, response.context["form"].errors
    proposal = Proposal.objects.get()
    assert (proposal.served_model, proposal.host) == (deployment.served_model, gpu.host)


def test_the_list_filters_by_state_host_and_author(client_as, personas):
    ready = ready_proposal(personas["oncall"])
    draft = create_proposal(personas["approver"])
    client = client_as("manager")
    assert _listed(client, "") == {ready.pk, draft.pk}
    assert _listed(client, "?state=ready_for_approval") == {ready.pk}
    assert _listed(client, f"?host={draft.host.name}") == {draft.pk}
    assert _listed(client, "?author=approver") == {draft.pk}
    assert _listed(client, f"?q={ready.served_model.name}") == {ready.pk}


def _listed(client, query):
    response = client.get(f"/proposals/{query}")
    assert response.status_code == 200
    return {p.pk for p in response.context["page"]}


def test_the_inbox_holds_what_waits_and_never_ones_own(client_as, personas):
    theirs = ready_proposal(personas["oncall"])
    own = ready_proposal(personas["approver"])
    create_proposal(personas["oncall"])
    response = client_as("approver").get("/proposals/inbox/")
    assert [p.pk for p in response.context["page"]] == [theirs.pk]
    assert own.pk not in [p.pk for p in response.context["page"]]


def test_the_inbox_shows_what_failed_its_checks_apart_with_the_gate_and_why(client_as, personas):
    failed = checked(create_proposal(personas["oncall"]), failing=(Gate.MEMORY,))
    checked(create_proposal(personas["approver"]), failing=(Gate.MEMORY,))  # their own
    sent_back = services.do_request_changes(
        ready_proposal(personas["oncall"]), acting_user=personas["approver"], comment="Why 4?"
    )
    waiting = ready_proposal(personas["oncall"])
    response = client_as("approver").get("/proposals/inbox/")
    assert [p.pk for p in response.context["page"]] == [waiting.pk]
    # Only what its gates sent back: not one an approver did, nor the approver's own.
    assert [p.pk for p in response.context["failed"]] == [failed.pk]
    assert sent_back.pk not in [p.pk for p in response.context["failed"]]
    body = response.content.decode()
    section = body.split('id="inbox-failed"', 1)[1]
    assert "Failed its checks" in section
    row = section.split(f'data-proposal="{failed.pk}"', 1)[1].split("</tr>", 1)[0]
    assert 'data-gate="memory"' in section and "Memory ledger" in row
    assert "fails (test figures)" in row
    assert f'data-proposal="{waiting.pk}"' not in section


def test_the_inbox_polls_what_failed_its_checks_as_it_polls_what_waits(client_as, personas):
    approver = client_as("approver")
    page = approver.get("/proposals/inbox/").content.decode()
    section = page.split('id="inbox-failed"', 1)[1]
    assert 'id="inbox-failed-table" data-poll-url="/proposals/inbox/?partial=failed"' in section
    empty = approver.get("/proposals/inbox/?partial=failed").content.decode()
    assert "No proposal failed its checks." in empty
    # One that fails its checks after the page was drawn arrives at the next poll.
    failed = checked(create_proposal(personas["oncall"]), failing=(Gate.MEMORY, Gate.KV))
    waiting = ready_proposal(personas["oncall"])
    rows = approver.get("/proposals/inbox/?partial=failed").content.decode()
    assert "<html" not in rows and "<thead" not in rows  # only the rows, for the table's body
    assert f'<tr data-proposal="{failed.pk}" data-gate="memory">' in rows
    assert f'<tr data-proposal="{failed.pk}" data-gate="kv">' in rows
    assert 'rowspan="2"' in rows and "Memory ledger" in rows
    assert f'data-proposal="{waiting.pk}"' not in rows
    assert "No proposal failed its checks." not in rows
    # The other table's poll still answers what waits, and only that.
    waiting_rows = approver.get("/proposals/inbox/?partial=1").content.decode()
    assert f'data-proposal="{waiting.pk}"' in waiting_rows
    assert f'data-proposal="{failed.pk}"' not in waiting_rows


def test_the_inbox_polls_answer_only_approvers(client_as):
    for query in ("?partial=1", "?partial=failed"):
        assert client_as("oncall").get(f"/proposals/inbox/{query}").status_code == 403


def test_an_approver_rejects_a_failed_proposal_but_cannot_approve_it(client_as, personas):
    failed = checked(create_proposal(personas["oncall"]), failing=(Gate.MEMORY,))
    approver = client_as("approver")
    page = approver.get(f"/proposals/{failed.pk}/?from=inbox")
    assert page.context["can_decide"] is False and page.context["can_reject"] is True
    refused = approver.post(f"/proposals/{failed.pk}/decide/", {"decision": "approve"})
    assert refused.status_code == 409
    failed.refresh_from_db()
    assert failed.state == State.CHANGES_REQUESTED
    approver.post(
        f"/proposals/{failed.pk}/decide/",
        {"decision": "reject", "comment": "No A100 holds a 70B model whole."},
    )
    failed.refresh_from_db()
    assert failed.state == State.REJECTED


def test_the_detail_shows_gates_with_runbook_links_and_both_diagrams(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    response = client_as("approver").get(f"/proposals/{proposal.pk}/")
    body = response.content.decode()
    assert response.context["can_decide"] is True
    for gate in ("memory", "kv", "isolation", "load_test"):
        assert f'id="gate-{gate}"' in body
    assert 'href="/runbooks/before-adding-a-model/"' in body
    assert 'href="/runbooks/kv-reservation/"' in body
    assert body.count('data-testid="placement-diagram"') == 2
    assert "<figcaption>Before</figcaption>" in body and "<figcaption>After</figcaption>" in body
    assert f"{proposal.served_model.name} (proposed)" in body
    assert 'id="decision"' in body


def test_the_author_sees_no_decision_panel(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    response = client_as("oncall").get(f"/proposals/{proposal.pk}/")
    assert response.context["can_decide"] is False
    assert 'id="decision"' not in response.content.decode()


def test_a_reject_without_comment_is_refused_on_the_page(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    response = client_as("approver").post(
        f"/proposals/{proposal.pk}/decide/", {"decision": "reject", "comment": ""}
    )
    assert response.status_code == 400
    assert response.context["decision_form"].errors["comment"] == [
        "A rejection needs a comment saying why."
    ]
    assert 'value="reject" checked' in response.content.decode()
    proposal.refresh_from_db()
    assert proposal.state == State.READY


def test_an_approver_who_wrote_the_proposal_is_refused_by_four_eyes(client):
    author = UserFactory(username="approving-author", roles=["approver"])
    proposal = ready_proposal(author)
    client.force_login(author)
    response = client.post(f"/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    assert response.status_code == 403
    assert b"someone else must approve it (four eyes)" in response.content


def test_approving_from_the_inbox_returns_to_it(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    response = client_as("approver").post(
        f"/proposals/{proposal.pk}/decide/", {"decision": "approve", "next": "inbox"}
    )
    assert response["Location"] == "/proposals/inbox/"
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED


def test_an_illegal_decision_says_why(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    response = client_as("approver").post(
        f"/proposals/{proposal.pk}/decide/", {"decision": "approve"}
    )
    assert response.status_code == 409
    assert "Cannot approve a proposal that is draft" in response.content.decode()


def test_editing_after_approval_warns_and_voids(client_as, personas):
    proposal = ready_proposal(personas["oncall"])
    client_as("approver").post(f"/proposals/{proposal.pk}/decide/", {"decision": "approve"})
    client = client_as("oncall")
    page = client.get(f"/proposals/{proposal.pk}/edit/")
    assert "earlier approvals no longer count" in page.content.decode()
    gpu = proposal.gpus.get()
    data = form_data(gpu, proposal.served_model, kv_reservation_gib="7")
    response = client.post(f"/proposals/{proposal.pk}/edit/", data)
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert (proposal.state, proposal.revision) == (State.SUBMITTED, 2)
    assert proposal.decisions.get().voided_at is not None


def test_only_the_author_edits(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    response = client_as("approver").get(f"/proposals/{proposal.pk}/edit/")
    assert response.status_code == 403
    assert b"Only its author, oncall, may edit this proposal." in response.content


def test_attaching_load_test_files_re_runs_the_checks(client_as, personas):
    proposal = checked(create_proposal(personas["oncall"]))
    files = [
        SimpleUploadedFile(path.name, path.read_bytes(), content_type="application/json")
        for path in sorted(LOADTESTS.glob("openai-*.json"))
    ]
    response = client_as("oncall").post(
        f"/proposals/{proposal.pk}/load-tests/",
        {"files": files, "card_peaks": "a100-node:1,74.5"},
    )
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert (proposal.state, proposal.revision) == (State.SUBMITTED, 2)
    test = proposal.load_tests.get()
    assert len(test.files) == 4
    assert test.run["card_peaks"] == {"a100-node:1": round(74.5 * GIB)}


def test_a_broken_load_test_file_is_refused_on_the_form(client_as, personas):
    proposal = create_proposal(personas["oncall"])
    bad = SimpleUploadedFile("result.json", b'{"completed": 1}')
    response = client_as("oncall").post(
        f"/proposals/{proposal.pk}/load-tests/", {"files": [bad], "card_peaks": "x,1"}
    )
    assert response.status_code == 400
    assert response.context["load_test_form"].errors["files"] == [
        "result.json: no 'model_id': not a result saved by vllm bench serve --save-result"
    ]
    assert "x,1" in response.content.decode()


def test_after_apply_the_host_page_shows_the_deployment_and_the_change(client_as, personas):
    gpu = GpuFactory()
    model = ServedModelFactory(name="summariser-8b")
    proposal = applied_proposal(
        personas["oncall"], personas["approver"], host=gpu.host, gpus=[gpu], model=model
    )
    page = client_as("manager").get(f"/hosts/{gpu.host.name}/")
    body = page.content.decode()
    assert "summariser-8b" in body
    drawing = page.context["placement"]
    assert [block.label for block in drawing.columns[0].blocks if block.kind == "model"] == [
        "summariser-8b"
    ]
    assert any(entry.action == "deployment.create" for entry in page.context["changes"])
    detail = client_as("manager").get(f"/proposals/{proposal.pk}/")
    actions = [entry.action for entry in detail.context["audit"]]
    assert "deployment.create" in actions and "proposal.apply" in actions
    assert Deployment.objects.get(served_model=model).host == gpu.host


def test_a_proposals_trail_is_found_by_its_change_ids(client_as, personas):
    gpu = GpuFactory()
    proposal = applied_proposal(personas["oncall"], personas["approver"], host=gpu.host, gpus=[gpu])
    applied = AuditEntry.objects.get(action="proposal.apply")
    deployment_row = AuditEntry.objects.get(action="deployment.create")
    assert deployment_row.change_id == applied.change_id
    # Neither the comment nor the moment ties them: the change id does.
    AuditEntry.objects.filter(pk=deployment_row.pk).update(
        comment="", at=applied.at - dt.timedelta(weeks=1)
    )
    elsewhere = DeploymentFactory(host=gpu.host)
    record(actor=None, action=Action.DEPLOYMENT_CHANGE, obj=elsewhere, before=None, after=None,
           host=gpu.host, comment=f"Proposal #{proposal.pk}: not really")  # fmt: skip

    trail = client_as("manager").get(f"/proposals/{proposal.pk}/").context["audit"]
    assert deployment_row in trail
    assert all(entry.object_id != str(elsewhere.pk) for entry in trail)


def test_deleting_a_load_test_in_the_admin_is_audited(client, personas):
    proposal = create_proposal(personas["oncall"])
    load_test = LoadTest.objects.create(
        proposal=proposal,
        uploaded_by=personas["oncall"],
        source_format="vllm-json",
        files=["run.json"],
        run={},
    )
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    client.post(f"/admin/proposals/loadtest/{load_test.pk}/delete/", {"post": "yes"})
    entry = AuditEntry.objects.get(action="load_test.delete")
    assert (entry.actor_name, entry.host, entry.before["files"]) == (
        "root", proposal.host, ["run.json"]
    )  # fmt: skip
