"""An approver's walk, in a real browser: the inbox, a ready proposal's gates, approval."""

import pytest

from console.proposals import services
from console.proposals.gates import Gate
from console.proposals.models import Proposal
from console.proposals.transitions import State
from inventory.models import Deployment
from tests.console.proposals.support import (
    create_proposal,
    recent_combined_import,
    seed_host,
    tasks_in_process,
)
from tests.factories import GIB, ServedModelFactory, UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"


@pytest.fixture
def eager_celery():
    with tasks_in_process() as app:
        yield app


@pytest.fixture
def ready(eager_celery):
    """phi-3-mini proposed for a100-node:1 of the seed host; the real gates pass it."""
    author = UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    UserFactory(username="approver", password=PASSWORD, roles=["approver"])
    host = seed_host()
    proposal = create_proposal(
        author,
        host=host,
        gpus=[host.gpus.get(index=1)],
        # 5 GiB: the card's co-tenants and this one each hold a CUDA context too.
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB),
        isolation_mode=Deployment.Isolation.TIME_SLICING,
        mps_acknowledged=True,
        expected_request_rate=3.0,
        # Its engine's share of the card, started after its neighbours (gate 5).
        engine_memory_fraction=0.17,
        staggered_start=True,
    )
    run, files = recent_combined_import(host.gpus.get(index=1))
    services.do_attach_load_test(proposal, acting_user=author, run=run, files=files)
    services.do_submit(proposal, acting_user=author)  # the gates run on commit, in-process
    proposal.refresh_from_db()
    assert proposal.state == State.READY
    return proposal


def test_an_approver_goes_from_the_inbox_to_an_approval(console_page, ready):
    page = console_page("approver-proposals")
    page.login("approver", PASSWORD)
    page.page.click("nav.mainnav >> text=Proposals")
    page.page.wait_for_load_state("networkidle")
    page.screenshot("proposal-list")
    page.page.click("text=Approver's inbox")
    page.page.wait_for_load_state("networkidle")
    inbox = page.page.locator("#inbox-table")
    assert "phi-3-mini" in inbox.inner_text()
    page.screenshot("inbox")

    inbox.locator("a", has_text="phi-3-mini").click()
    page.page.wait_for_load_state("networkidle")
    assert page.page.locator("#proposal-state").inner_text() == "ready for approval"
    for gate in ("memory", "kv", "isolation", "load_test"):
        verdict = page.page.locator(f"[data-testid=gate-{gate}] .verdict").inner_text()
        assert verdict.lower() == "pass", gate
    assert page.page.locator("[data-testid=placement-diagram]").count() == 2
    assert "a100-node:1" in page.page.locator("[data-testid=gate-memory]").inner_text()
    page.screenshot("ready-proposal")

    page.page.check("input[name=decision][value=approve]")
    page.page.fill("#id_comment", "Card 1 stays under its bound in the combined test.")
    page.page.click("#decision button[type=submit]")
    page.page.wait_for_load_state("networkidle")
    assert page.page.url.endswith("/proposals/inbox/")
    assert "Nothing waits for you." in page.page.locator("#inbox-table").inner_text()
    assert "approved" in page.page.locator(".messages").inner_text()
    page.screenshot("inbox-after-approval")

    page.open(f"/proposals/{ready.pk}/")
    assert page.page.locator("#proposal-state").inner_text() == "approved"
    assert "Approved by approver" in page.page.locator("#decisions").inner_text()
    page.screenshot("approved-proposal")
    assert page.errors == []
    decision = Proposal.objects.get(pk=ready.pk).decisions.get()
    assert decision.comment == "Card 1 stays under its bound in the combined test."
    assert [row["gate"] for row in decision.evidence] == [gate.value for gate in Gate]
