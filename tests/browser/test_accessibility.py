"""axe-core (bundled with axe-playwright-python, run in the page, nothing fetched) on every
page each persona opens: no serious or critical violation."""

import pytest
from axe_playwright_python.sync_playwright import Axe

from console.proposals import services
from tests.console.proposals.support import create_proposal, outcomes, seed_host
from tests.factories import GIB, ServedModelFactory, UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
SERIOUS = {"serious", "critical"}


@pytest.fixture
def fleet():
    author = UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    UserFactory(username="approver", password=PASSWORD, roles=["approver"])
    UserFactory(username="manager", password=PASSWORD, roles=["manager"])
    host = seed_host()
    proposal = create_proposal(
        author,
        host=host,
        gpus=[host.gpus.get(index=2)],
        model=ServedModelFactory(name="phi-3-mini", weights_bytes=6 * GIB),
    )
    services.do_submit(proposal, acting_user=author)
    services.do_start_checks(proposal.pk, proposal.revision)
    services.do_record_gate_results(proposal.pk, proposal.revision, outcomes())
    return {"host": host, "proposal": proposal}


def _pages(fleet) -> dict[str, list[str]]:
    host, proposal = fleet["host"], fleet["proposal"]
    common = [
        "/",
        f"/hosts/{host.name}/",
        "/models/",
        f"/models/{proposal.served_model_id}/",
        "/oom/",
        "/proposals/",
        f"/proposals/{proposal.pk}/",
        "/runbooks/",
        "/accounts/profile/",
    ]
    return {
        "oncall": [*common, "/proposals/new/", f"/proposals/new/?host={host.name}"],
        "approver": [*common, "/proposals/inbox/"],
        "manager": [*common, "/audit/", "/ingest/dead-letters/"],
    }


def _serious(results) -> list[str]:
    found = []
    for violation in results.response["violations"]:
        if violation["impact"] in SERIOUS:
            targets = [", ".join(node["target"]) for node in violation["nodes"][:3]]
            found.append(f"{violation['id']} ({violation['impact']}): {'; '.join(targets)}")
    return found


@pytest.mark.parametrize("persona", ["oncall", "approver", "manager"])
def test_no_page_has_a_serious_accessibility_violation(console_page, fleet, persona):
    axe = Axe()
    page = console_page(f"{persona}-axe")
    page.login(persona, PASSWORD)
    problems = {}
    for path in _pages(fleet)[persona]:
        response = page.open(path)
        assert response.status == 200, path
        found = _serious(axe.run(page.page))
        if found:
            problems[path] = found
    assert problems == {}, "\n".join(f"{path}: {found}" for path, found in problems.items())
