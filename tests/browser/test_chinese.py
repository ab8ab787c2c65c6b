"""Every page in Simplified Chinese, as each persona, in a real browser with CJK fonts.

The language is chosen with the switcher in the navigation (on the login page, before
logging in) and must hold on every page after; the page chrome (navigation, headings, table
heads, labels, buttons) must hold no English word beyond the field's kept terms and the data
the page shows. Screenshots go to test-artifacts/screenshots/zh-hans-*.
"""

import datetime as dt
import re

import pytest
from django.utils import timezone

from console.alerts.models import AlertRule
from console.proposals.models import LoadTest
from inventory.analytics.oom_triage import triage_snapshot
from inventory.ingest.dead_letters import storable
from inventory.models import DeadLetter, Deployment, Event
from inventory.wire.schema import BatchRejected
from runbooks.models import MPS_NOTE_SLUG, RunbookNote
from tests.batches import GIB, write_history
from tests.console.alerts.support import matrix_objects as alert_objects
from tests.console.operations.support import matrix_objects as operation_objects
from tests.console.proposals.support import ready_proposal
from tests.console.test_i18n import TRUE_PEAK_SNAPSHOT
from tests.factories import DeploymentFactory, GpuFactory, UserFactory

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

PASSWORD = "a long demo password"
PAGES = [
    "/",
    "/hosts/{host}/",
    "/models/",
    "/models/{model}/",
    "/oom/",
    "/runbooks/",
    f"/runbooks/{MPS_NOTE_SLUG}/",
    f"/runbooks/{MPS_NOTE_SLUG}/history/",
    f"/runbooks/{MPS_NOTE_SLUG}/history/1/",
    "/runbooks/new/",
    "/audit/",
    "/proposals/",
    "/proposals/inbox/",
    "/proposals/new/",
    "/proposals/{proposal}/",
    "/ingest/dead-letters/",
    "/ingest/dead-letters/{letter}/",
    "/alerts/",
    "/alerts/{alert}/",
    "/alerts/rules/",
    "/alerts/rules/{rule}/edit/",
    "/alerts/silences/new/",
    "/hosts/{host}/operations/",
    "/accounts/profile/",
    "/proposals/{proposal}/load-tests/{load_test}/",
]
PERSONAS = {"oncall": ["oncall"], "approver": ["approver"], "manager": ["manager"], "outsider": []}
# Terms the Chinese console keeps as they are (docs/glossary-zh.md), and units.
KEPT = {
    "GPU", "MIG", "MPS", "KV", "P95", "P99", "SLO", "OOM", "OOMs", "GiB", "MiB", "UUID", "CSV",
    "Xid", "NVML", "SM", "SMs", "ID", "token", "vLLM", "SGLang", "TGI", "Ollama", "JSON",
    "UTC", "ISO", "ms", "Webhook", "Markdown", "English", "NVIDIA", "SXM4", "HBM3", "PCIe",
    "API", "TTFT", "ITL",
}  # fmt: skip
# Where the page chrome is: what the console itself says, not the data it shows.
CHROME = (
    "header.topbar nav a, header.topbar button, h1, h2, h3, h4, th, dt, .field > label,"
    " form label:not(.field label), button, a.button, summary, figcaption, .pagination"
)
# Inside these the page shows data: a note's own Markdown, the fields an audit row changed.
DATA_SELECTOR = ".markdown-body, .beforeafter, #audit-table td, #audit td"
ENGLISH_WORD = re.compile(r"[A-Za-z][A-Za-z'’]+")


@pytest.fixture
def fleet():
    gpu = GpuFactory(host__name="mps-l40s", product_name="NVIDIA L40S")
    deployments = [
        DeploymentFactory(
            host=gpu.host,
            gpus=[gpu],
            isolation_mode=Deployment.Isolation.MPS,
            mps_active_thread_percentage=share,
        )
        for share in (40, 60)
    ]
    start = (timezone.now() - dt.timedelta(hours=2)).timestamp()
    write_history(gpu.host, [(gpu, d) for d in deployments], start=start, minutes=120,
                  demand=lambda m, i: (10 + i + m % 7) * GIB, running=lambda m, i: 4.0 + m % 5,
                  p99=lambda m, i: 0.2 + 0.01 * (m % 9))  # fmt: skip
    triage = triage_snapshot(TRUE_PEAK_SNAPSHOT, 101)
    Event.objects.create(host=gpu.host, gpu=gpu, kind=Event.Kind.OOM, cause=triage.cause.value,
                         cause_reason=triage.reason.to_json(), snapshot=TRUE_PEAK_SNAPSHOT,
                         at=timezone.now() - dt.timedelta(minutes=30),
                         batch_id="00000000-0000-4000-8000-0000000000e1", position=0)  # fmt: skip
    users = {
        name: UserFactory(username=name, password=PASSWORD, roles=roles)
        for name, roles in PERSONAS.items()
    }
    proposal = ready_proposal(users["oncall"], host=gpu.host, gpus=[gpu])
    rejected = BatchRejected("unknown_host", "unknown_host", "host", host="'nowhere'")
    letter = DeadLetter.objects.create(
        body=b'{"host": "nowhere"}', size=19, reason_code=rejected.code, reason=rejected.message,
        reason_path=rejected.path, reason_message=storable(rejected),
    )  # fmt: skip
    alerts = alert_objects(gpu.host)
    operation_objects(users, gpu.host, deployments[0], gpu)
    load_test = _finished_load_test(proposal, users["oncall"], gpu)
    data = {d.served_model.name for d in deployments} | {proposal.served_model.name}
    data |= {gpu.host.name, "oncall", "approver", "manager", "outsider", "admin"}
    data |= set(RunbookNote.objects.values_list("title", flat=True))
    data |= set(AlertRule.objects.values_list("name", flat=True))  # rules are named by people
    data |= {d.runtime_name for d in Deployment.objects.all()} - {""}
    return {
        "host": gpu.host.name,
        "model": deployments[0].served_model.pk,
        "proposal": proposal.pk,
        "letter": letter.pk,
        "alert": alerts["alert"].pk,
        "rule": alerts["alert_rule"].slug,
        "load_test": load_test.pk,
        "data": data,
    }


def _finished_load_test(proposal, user, gpu) -> LoadTest:
    """A combined test the console ran to its end, memory the first bound it reached."""
    end = timezone.now() - dt.timedelta(minutes=5)
    start = end - dt.timedelta(minutes=3)
    models = [
        {"model": d.served_model.name, "rate_rps": 2.0, "target_share": 0.5, "failed": 0,
         "errors": {}, "slo_ms": 800, "ttft_ms": {"p50": 40, "p95": 90, "p99": 120},
         "e2e_ms": {"p50": 300, "p95": 520, "p99": 610}, "itl_ms": {"p99": 12.5}}
        for d in proposal.host.deployments.all()
    ]  # fmt: skip
    bound = {"kind": "memory", "card": str(gpu), "peak_bytes": 44 * GIB,
             "bound_bytes": 42 * GIB, "at": f"{end:%H:%M:%S}", "phase": "hold", "t_s": 150,
             "load_rps": {m["model"]: 2.0 for m in models}}  # fmt: skip
    return LoadTest.objects.create(
        proposal=proposal, uploaded_by=user, source_format=LoadTest.Format.MEASURED,
        files=["combined test"], status=LoadTest.Status.DONE, window_start=start,
        window_end=end, result={
            "models": models, "first_bound": bound, "cold_start": {"ran": True},
            "cards": [{"card": str(gpu), "peak_bytes": 44 * GIB, "bound_bytes": 42 * GIB}],
        },
    )  # fmt: skip


def _english_in_chrome(page, data: set[str]) -> list[str]:
    texts = page.page.eval_on_selector_all(
        CHROME,
        "(nodes, data) => nodes.filter(n => n.offsetParent !== null && !n.closest(data))"
        ".map(n => (n.innerText || '') + ' ' + (n.getAttribute('placeholder') || ''))",
        DATA_SELECTOR,
    )
    found = []
    for text in texts:
        for value in data:  # names of hosts, models and people are data, not chrome
            text = text.replace(value, " ")
        words = [w for w in ENGLISH_WORD.findall(text) if w not in KEPT]
        if words:
            found.append(f"{text.strip()!r}: {words}")
    return found


def _switch_to(page, language: str) -> None:
    with page.page.expect_navigation():
        page.page.select_option("#language-select", language)
    page.page.wait_for_load_state("networkidle")


@pytest.mark.parametrize("persona", ["oncall", "approver", "manager", "outsider"])
def test_every_page_in_chinese_as_each_persona(console_page, fleet, persona):
    page = console_page(f"zh-hans-{persona}")
    page.open("/accounts/login/")
    _switch_to(page, "zh-hans")
    assert page.page.locator("h1").inner_text() == "登录"
    page.login(persona, PASSWORD)
    untranslated = {}
    for template in PAGES:
        path = template.format(**fleet)
        response = page.open(path)
        # What a persona may not see answers 404, what it may only not use 403: in Chinese too.
        assert response.status in (200, 403, 404), (persona, path, response.status)
        assert page.page.locator("html").get_attribute("lang") == "zh-hans", (persona, path)
        assert page.page.locator("#language-select").input_value() == "zh-hans"
        found = _english_in_chrome(page, fleet["data"])
        if found:
            untranslated[path] = found
        page.screenshot(path)
    report = [f"{path}: {text}" for path, found in untranslated.items() for text in found]
    assert not report, "untranslated English in the page chrome:\n" + "\n".join(report)
    # Chromium logs each 403 and 404 page as a failed load.
    assert [e for e in page.errors if not re.search(r"status of 40[34]\b", e)] == []


def test_a_stored_triage_reads_in_chinese_after_switching_and_back(console_page, fleet):
    page = console_page("zh-hans-switch")
    page.login("oncall", PASSWORD)
    page.open(f"/hosts/{fleet['host']}/")
    timeline = page.page.locator("#oom-timeline")
    assert "needed 2.0 GiB; card free 0.4 GiB; processes allocated" in timeline.inner_text()
    _switch_to(page, "zh-hans")
    assert page.page.url.endswith(f"/hosts/{fleet['host']}/")
    text = timeline.inner_text()
    assert "需要 2.0 GiB；卡空闲 0.4 GiB；进程已分配" in text and "真实峰值" in text
    assert "needed" not in text
    page.screenshot("oom-timeline")
    page.open("/oom/")  # the choice holds on the next page without asking again
    assert page.page.locator("h1").inner_text() == "OOM 历史"
    page.open(f"/hosts/{fleet['host']}/")
    _switch_to(page, "en")
    text = timeline.inner_text()
    assert "processes allocated" in text and "真实峰值" not in text
    assert page.errors == []
