"""The author's and the approver's day in a real browser: a proposal filed through the guided
form with its what-if in view, the gates' progress while they run, and the approver's inbox
that shows it arrive without a reload."""

from pathlib import Path

import pytest

from console.proposals import progress, services
from console.proposals.gates import Gate, GateOutcome, GateStatus
from console.proposals.models import Proposal
from console.proposals.tasks import run_gates
from console.proposals.transitions import State
from tests.console.proposals.support import (
    checked,
    create_proposal,
    outcomes,
    recent_combined_import,
    seed_host,
    shared_host,
    tasks_in_process,
)
from tests.factories import GIB, ServedModelFactory, UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
# The inbox polls every 10 s: an arrival must show within two polls.
ARRIVAL_MS = 25000


@pytest.fixture
def people():
    return {
        "oncall": UserFactory(username="oncall", password=PASSWORD, roles=["oncall"]),
        "approver": UserFactory(username="approver", password=PASSWORD, roles=["approver"]),
    }


def test_an_author_files_through_the_guided_form_and_the_approver_sees_it_arrive(
    console_page, people
):
    host = seed_host()
    # 5 GiB of weights: with its CUDA context the model fits card 1 beside its co-tenants.
    ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB)
    approver = console_page("approver-guided")
    approver.login("approver", PASSWORD)
    approver.open("/proposals/inbox/")
    assert "Nothing waits for you." in approver.page.locator("#inbox-table").inner_text()

    author = console_page("author-guided")
    author.login("oncall", PASSWORD)
    author.open("/proposals/new/")
    form = author.page
    assert form.locator("input[name=gpus]").count() == 0  # no fleet-wide card list
    form.select_option("#id_served_model", label="phi-3-mini")
    form.fill("#id_host", "a100")
    form.locator("[data-testid=host-matches] button", has_text="a100-node").click()
    form.wait_for_selector("[data-testid=card-picker]")
    assert form.locator("input[name=gpus]").count() == host.gpus.count()
    form.check(f"input[name=gpus][value='{host.gpus.get(index=1).pk}']")
    form.check("input[name=isolation_mode][value=time_slicing]")
    form.check("#id_mps_acknowledged")
    form.fill("#id_kv_tokens_per_request", "4096")
    form.fill("#id_expected_p95_concurrency", "10")
    form.select_option("#id_admission_policy", "queue")
    form.fill("#id_expected_request_rate", "3")
    form.fill("#id_rationale", "A small chat model beside the seed's five, on card 1.")
    form.fill("#id_engine_memory_fraction", "0.17")  # gate 5: the engines' shares fit
    form.check("#id_staggered_start")
    form.wait_for_selector("[data-testid=whatif-gate-memory]")
    # Waits are functions, not expressions: Playwright evals an expression in the page, and the
    # pages' Content-Security-Policy forbids eval.
    form.wait_for_function("() => document.querySelector('#id_kv_reservation_gib').value !== ''")
    whatif = form.locator("[data-testid=whatif]")
    assert whatif.locator("[data-testid=placement-diagram]").count() == 2
    assert "phi-3-mini (proposed)" in whatif.inner_text()
    assert "a100-node:1" in form.locator("[data-testid=whatif-gate-memory]").inner_text()
    assert "Advisor: P95 concurrency 10.0 -> 10 requests" in form.locator("#kv-advice").inner_text()
    form.wait_for_selector("#proposal-form[data-pending='0']")
    author.screenshot("guided-form-whatif")
    assert Proposal.objects.count() == 0  # the what-if kept nothing

    form.click("button:has-text('Save as draft')")
    form.wait_for_load_state("networkidle")
    proposal = Proposal.objects.get()
    assert proposal.kv_reservation_bytes == 6 * GIB  # 10 x 4096 x 128 KiB x 1.2
    # Gate 4 checks an import's card peaks against telemetry of its window: results of the
    # last minutes, with that window's telemetry ingested.
    _, results = recent_combined_import(host.gpus.get(index=1), bodies=True)
    files = [
        {"name": name, "mimeType": "application/json", "buffer": body} for name, body in results
    ]
    form.set_input_files("#load-test-form input[type=file]", files)
    form.fill("#load-test-form textarea", "a100-node:1,74.5")
    form.click("#load-test-form button[type=submit]")
    form.wait_for_load_state("networkidle")
    form.click("button:has-text('Submit for checks')")
    form.wait_for_load_state("networkidle")
    assert form.locator("[data-testid=gate-progress]").count() == 1
    # What the worker does with the queued check, here in the test's own thread.
    with tasks_in_process():
        run_gates(proposal.pk, Proposal.objects.get(pk=proposal.pk).revision)
    # Meanwhile another fails gate 1: it arrives in the inbox's other section, unreloaded too.
    failed = checked(create_proposal(people["oncall"]), failing=(Gate.MEMORY,))
    form.wait_for_function(
        "() => document.querySelector('#proposal-state').textContent === 'ready for approval'"
    )
    author.screenshot("checked-without-reload")

    approver.page.wait_for_selector(
        f"#inbox-table tr.arrived[data-proposal='{proposal.pk}']", timeout=ARRIVAL_MS
    )
    approver.page.wait_for_selector(
        f"#inbox-failed-table tr.arrived[data-proposal='{failed.pk}'][data-gate='memory']",
        timeout=ARRIVAL_MS,
    )
    # Said once both tables are in (one poll may bring both, or each its own: "1 new" or "2").
    approver.page.wait_for_function(
        "() => /^[12] new since the last look/"
        ".test(document.querySelector('#inbox-refresh').textContent)"
    )
    approver.screenshot("inbox-arrived-without-reload")
    approver.page.locator("#inbox-table a", has_text="phi-3-mini").click()
    approver.page.wait_for_load_state("networkidle")
    approver.page.check("input[name=decision][value=approve]")
    approver.page.click("#decision button[type=submit]")
    approver.page.wait_for_load_state("networkidle")
    proposal.refresh_from_db()
    assert proposal.state == State.APPROVED
    assert author.errors == [] and approver.errors == []


def test_the_detail_page_shows_each_gate_as_it_finishes(console_page, people):
    proposal = create_proposal(people["oncall"])
    services.do_submit(proposal, acting_user=people["oncall"])
    services.do_start_checks(proposal.pk, proposal.revision)
    progress.started(proposal.pk, proposal.revision)
    page = console_page("approver-progress")
    page.login("approver", PASSWORD)
    page.open(f"/proposals/{proposal.pk}/")
    memory = page.page.locator("#gate-progress li[data-gate=memory] .verdict")
    assert memory.text_content() == "waiting"

    progress.finished(
        proposal.pk, proposal.revision, GateOutcome(Gate.MEMORY, GateStatus.PASS, "fits")
    )
    page.page.wait_for_function(
        "() => document.querySelector('#gate-progress li[data-gate=memory] .verdict')"
        ".textContent === 'pass'"
    )
    page.screenshot("gates-in-progress")
    services.do_record_gate_results(proposal.pk, proposal.revision, outcomes())
    page.page.wait_for_function(
        "() => document.querySelector('#proposal-state').textContent === 'ready for approval'"
    )
    assert page.page.locator("[data-testid=gate-load_test]").count() == 1
    page.screenshot("gates-finished-without-reload")
    assert page.errors == []


def test_the_guided_form_works_without_javascript(chromium_browser, live_server, people):
    host = seed_host()
    # 5 GiB of weights: with its CUDA context the model fits card 1 beside its co-tenants.
    ServedModelFactory(name="phi-3-mini", weights_bytes=5 * GIB)
    context = chromium_browser.new_context(java_script_enabled=False)
    page = context.new_page()
    try:
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("#id_username", "oncall")
        page.fill("#id_password", PASSWORD)
        page.click("section.login button[type=submit]")
        page.goto(f"{live_server.url}/proposals/new/")
        page.fill("#id_host", "a100")
        page.click("button[name=find_host]")
        page.click("button[name=pick_host][value=a100-node]")
        page.select_option("#id_served_model", label="phi-3-mini")
        page.check(f"input[name=gpus][value='{host.gpus.get(index=1).pk}']")
        page.check("input[name=isolation_mode][value=gpu_group]")
        page.fill("#id_kv_tokens_per_request", "4096")
        page.fill("#id_expected_p95_concurrency", "10")
        page.click("#preview-button")
        assert page.locator("[data-testid=whatif-gate-kv]").count() == 1
        assert page.locator("#id_kv_reservation_gib").input_value() == "6.000"
        ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "author-no-js-guided-preview.png"), full_page=True)
        assert Proposal.objects.count() == 0
    finally:
        context.close()


def test_ticking_the_replicas_it_replaces_makes_a_card_group_fit(console_page, people):
    host, gpus, replicas = shared_host()
    ServedModelFactory(name="chat-group", weights_bytes=140 * GIB)
    author = console_page("author-replaces")
    author.login("oncall", PASSWORD)
    author.open("/proposals/new/")
    form = author.page
    form.select_option("#id_served_model", label="chat-group")
    form.fill("#id_host", "h100")
    form.locator("[data-testid=host-matches] button", has_text=host.name).click()
    # The host's fragment brings its running deployments, and only them, to tick.
    form.wait_for_selector("[data-testid=replaces]")
    assert form.locator("input[name=replaces]").count() == len(replicas)
    for gpu in gpus:
        form.check(f"input[name=gpus][value='{gpu.pk}']")
    form.check("input[name=isolation_mode][value=gpu_group]")
    form.fill("#id_kv_tokens_per_request", "4096")
    form.fill("#id_expected_p95_concurrency", "10")
    form.wait_for_selector(".gate-fail[data-testid=whatif-gate-memory]")
    for replica in replicas:
        form.check(f"input[name=replaces][value='{replica.pk}']")
    form.wait_for_selector(".gate-pass[data-testid=whatif-gate-memory]")
    form.wait_for_selector("#proposal-form[data-pending='0']")
    after = form.locator("[data-testid=whatif] [data-testid=placement-diagram]").nth(1)
    assert f"chat #{replicas[0].pk}" not in after.inner_text()
    author.screenshot("guided-replaces-group-fits")
    assert Proposal.objects.count() == 0
    assert author.errors == []
