"""The JSON API: create a proposal with a token, read its status and gates."""

import pytest
from rest_framework.test import APIClient

from console.proposals.models import Proposal
from console.proposals.transitions import State
from tests.console.proposals.support import ready_proposal
from tests.factories import GIB, GpuFactory, ServedModelFactory
from tests.tokens import token_for

pytestmark = pytest.mark.django_db


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def body(gpu, model, **overrides) -> dict:
    return {
        "served_model": model.name,
        "host": gpu.host.name,
        "cards": [gpu.index],
        "isolation_mode": "gpu_group",
        "kv_reservation_bytes": 6 * GIB,
        "kv_tokens_per_request": 4096,
        "expected_p95_concurrency": 10,
        "admission_policy": "queue",
        "rationale": "From the deploy pipeline.",
    } | overrides


def test_create_and_submit_with_a_token(personas, monkeypatch, django_capture_on_commit_callbacks):
    queued = []
    monkeypatch.setattr(
        "console.proposals.queue.queue_gate_checks", lambda pk, rev: queued.append((pk, rev))
    )
    gpu, model = GpuFactory(), ServedModelFactory()
    client = token_client(personas["oncall"])
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/api/proposals/", body(gpu, model, submit=True), format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    proposal = Proposal.objects.get()
    assert data["id"] == proposal.pk
    assert data["state"] == State.SUBMITTED == proposal.state
    assert data["cards"] == [str(gpu)]
    assert data["author"] == "oncall"
    assert data["url"].endswith(f"/proposals/{proposal.pk}/")
    assert queued == [(proposal.pk, 1)]


def test_bad_input_answers_400_with_the_reason_per_field(personas):
    gpu, model = GpuFactory(), ServedModelFactory()
    client = token_client(personas["oncall"])
    response = client.post(
        "/api/proposals/", body(gpu, model, cards=[8], host=gpu.host.name), format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"cards": [f"{gpu.host.name} has no card 8."]}
    response = client.post(
        "/api/proposals/",
        body(
            gpu,
            model,
            isolation_mode="mig",
            kv_reservation_basis="none",
            mps_active_thread_percentage=50,
        ),
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["mig_slice"] == ["A MIG deployment needs its MIG slice."]
    assert response.json()["mps_active_thread_percentage"] == [
        "Only MPS deployments take a thread share."
    ]
    assert response.json()["kv_reservation_basis"] == ["Say how the KV reservation was sized."]
    response = client.post("/api/proposals/", {"host": "nowhere"}, format="json")
    assert response.status_code == 400
    assert "isolation_mode" in response.json() and "rationale" in response.json()
    assert not Proposal.objects.exists()


def test_the_engine_settings_travel_with_the_proposal(personas):
    gpu, model = GpuFactory(), ServedModelFactory()
    client = token_client(personas["oncall"])
    settings = {"engine_memory_fraction": 0.45, "engine_version": "0.28.0", "staggered_start": True}
    response = client.post("/api/proposals/", body(gpu, model, **settings), format="json")
    assert response.status_code == 201, response.json()
    proposal = Proposal.objects.get()
    assert (proposal.engine_memory_fraction, proposal.engine_version) == (0.45, "0.28.0")
    assert proposal.staggered_start
    response = client.post(
        "/api/proposals/", body(gpu, model, engine_memory_fraction=1.5), format="json"
    )
    assert response.status_code == 400
    assert "engine_memory_fraction" in response.json()


def test_a_manager_reads_but_may_not_propose(personas):
    gpu, model = GpuFactory(), ServedModelFactory()
    client = token_client(personas["manager"])
    response = client.post("/api/proposals/", body(gpu, model), format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": "Your role may not propose placement changes."}
    assert client.get("/api/proposals/").status_code == 200


def test_the_status_lists_the_gates_of_the_current_revision(personas):
    proposal = ready_proposal(personas["oncall"])
    response = token_client(personas["manager"]).get(f"/api/proposals/{proposal.pk}/")
    assert response.status_code == 200
    data = response.json()
    assert data["state"] == "ready_for_approval"
    assert [gate["gate"] for gate in data["gates"]] == [
        "memory",
        "kv",
        "isolation",
        "load_test",
        "engine_settings",
    ]
    assert data["gates"][1]["status"] == "pass"
    assert data["gates"][0]["runbook_url"].endswith("/runbooks/before-adding-a-model/")
    assert data["decisions"] == []


def test_no_token_no_answer(personas):
    assert APIClient().get("/api/proposals/").status_code == 401
    missing = token_client(personas["oncall"]).get("/api/proposals/999999/")
    assert missing.status_code == 404


def test_the_openapi_document_describes_both_endpoints(client_as):
    schema = client_as("oncall").get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert "post" in schema["paths"]["/api/proposals/"]
    assert "get" in schema["paths"]["/api/proposals/{id}/"]
    create = schema["components"]["schemas"]["ProposalCreate"]
    assert {"served_model", "host", "cards", "kv_reservation_bytes", "submit"} <= set(
        create["properties"]
    )
