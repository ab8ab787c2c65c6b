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

from inventory.analytics.oom_triage import triage_snapshot
from inventory.models import DeadLetter, Deployment, Event
from runbooks.models import MPS_NOTE_SLUG, RunbookNote
from tests.batches import GIB, write_history
from tests.console.test_i18n import TRUE_PEAK_SNAPSHOT
from tests.factories import DeploymentFactory, GpuFactory, UserFactory
from tests.proposals.support import ready_proposal

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
]
# Terms the Chinese console keeps as they are (docs/glossary-zh.md), and units.
KEPT = {
    "GPU", "MIG", "MPS", "KV", "P95", "P99", "SLO", "OOM", "OOMs", "GiB", "MiB", "UUID", "CSV",
    "Xid", "NVML", "SM", "SMs", "ID", "token", "vLLM", "SGLang", "TGI", "Ollama", "JSON",
    "UTC", "ISO", "ms", "Webhook", "Markdown", "English", "NVIDIA", "SXM4", "HBM3", "PCIe",
    "API",
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
    author = UserFactory(username="oncall", password=PASSWORD, roles=["oncall"])
    proposal = ready_proposal(author, host=gpu.host, gpus=[gpu])
    letter = DeadLetter.objects.create(
        body=b'{"host": "nowhere"}', size=19, reason_code="unknown_host", reason="unknown host"
    )
    data = {d.served_model.name for d in deployments} | {proposal.served_model.name}
    data |= {gpu.host.name, "oncall", "approver", "manager", "outsider", "admin"}
    data |= set(RunbookNote.objects.values_list("title", flat=True))
    return {
        "host": gpu.host.name,
        "model": deployments[0].served_model.pk,
        "proposal": proposal.pk,
        "letter": letter.pk,
        "data": data,
    }


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
    if persona != "oncall":
        UserFactory(
            username=persona, password=PASSWORD, roles=[persona] if persona != "outsider" else []
        )
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
