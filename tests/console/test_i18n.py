"""English and Simplified Chinese: the language chosen, remembered, and reasons stored as codes."""

import datetime as dt
import gettext
import importlib

import pytest
from django.apps import apps as django_apps
from django.conf import settings
from django.utils import timezone

from console import catalogue
from console.core.preferences.models import Preference
from console.core.preferences.services import do_set_time_zone
from console.core.reason_text import render_in
from console.placement.solver import solve
from inventory.analytics.oom_triage import triage_snapshot
from inventory.analytics.reasons import Reason, register, render
from inventory.models import Event
from tests.batches import GIB
from tests.factories import GpuFactory

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9,en;q=0.5"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en-GB,en;q=0.9"}

# A card where a 2 GiB allocation failed with 0.4 GiB free and almost nothing cached: true peak.
TRUE_PEAK_SNAPSHOT = {
    "card_total_bytes": 80 * GIB,
    "card_reserved_bytes": GIB // 2,
    "free_bytes": 2 * GIB // 5,
    "requested_bytes": 2 * GIB,
    "processes": [
        {
            "pid": 101,
            "used_bytes": 79 * GIB,
            "allocator": {
                "reserved_bytes": 70 * GIB,
                "allocated_bytes": 70 * GIB - 100 * 1024**2,
                "inactive_split_bytes": 100 * 1024**2,
                "largest_free_block_bytes": 50 * 1024**2,
            },
        }
    ],
}


@pytest.fixture
def oom_host():
    gpu = GpuFactory(index=0, memory_total_bytes=80 * GIB)
    triage = triage_snapshot(TRUE_PEAK_SNAPSHOT, 101)
    Event.objects.create(
        host=gpu.host,
        gpu=gpu,
        kind=Event.Kind.OOM,
        at=timezone.now() - dt.timedelta(hours=1),
        snapshot=TRUE_PEAK_SNAPSHOT,
        detail={"pid": 101},
        cause=triage.cause.value,
        cause_reason=triage.reason.to_json(),
        batch_id="00000000-0000-4000-8000-0000000000c1",
        position=0,
    )
    return gpu.host


@pytest.mark.django_db
def test_accept_language_decides_without_a_choice(client_as):
    client = client_as("oncall")
    chinese = client.get("/", **ZH).content.decode()
    assert '<html lang="zh-hans">' in chinese
    assert "<h1>机群</h1>" in chinese and "退出登录" in chinese
    english = client.get("/", **EN).content.decode()
    assert '<html lang="en">' in english and "<h1>Fleet</h1>" in english


@pytest.mark.django_db
def test_the_choice_is_remembered_over_accept_language(client_as):
    client = client_as("approver")
    response = client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/proposals/"}, **EN)
    assert response.status_code == 302 and response["Location"] == "/proposals/"
    assert client.cookies[settings.LANGUAGE_COOKIE_NAME].value == "zh-hans"
    for path in ("/", "/proposals/", "/runbooks/", "/oom/"):
        assert '<html lang="zh-hans">' in client.get(path, **EN).content.decode(), path
    client.post("/i18n/setlang/", {"language": "en", "next": "/"}, **ZH)
    assert "<h1>Fleet</h1>" in client.get("/", **ZH).content.decode()


@pytest.mark.django_db
def test_the_login_page_switches_language_before_anyone_logs_in(client):
    client.post("/i18n/setlang/", {"language": "zh-hans", "next": "/accounts/login/"})
    page = client.get("/accounts/login/").content.decode()
    assert "<h1>登录</h1>" in page and 'name="language"' in page


@pytest.mark.django_db
def test_a_triage_stored_as_a_code_reads_in_either_language(client_as, oom_host):
    client = client_as("oncall")
    chinese = client.get(f"/hosts/{oom_host.name}/", **ZH).content.decode()
    assert "需要 2.0 GiB；卡空闲 0.4 GiB；进程已分配" in chinese
    assert "真实峰值" in chinese and "needed 2.0 GiB" not in chinese
    english = client.get(f"/hosts/{oom_host.name}/", **EN).content.decode()
    assert "needed 2.0 GiB; card free 0.4 GiB; processes allocated" in english
    assert "真实峰值" not in english


@pytest.mark.django_db
def test_the_javascript_catalogue_serves_the_chinese_strings(client):
    client.post("/i18n/setlang/", {"language": "zh-hans"})
    script = client.get("/jsi18n/").content.decode()
    assert "\\u6807\\u7b7e\\u9875\\u9690\\u85cf" in script or "标签页隐藏" in script


@pytest.mark.django_db
def test_existing_rows_get_their_reason_from_the_stored_snapshot(oom_host):
    event = Event.objects.get(host=oom_host)
    event.cause_reason = {}
    event.cause_explanation = triage_snapshot(TRUE_PEAK_SNAPSHOT, 101).explanation
    event.save()
    migration = importlib.import_module(
        "inventory.migrations.0019_oom_cause_reason_and_verbose_names"
    )
    migration.structure_stored_explanations(django_apps, None)
    event.refresh_from_db()
    assert event.cause_reason["code"] == "oom.explanation"
    assert render(event.cause_reason) == event.cause_explanation
    assert "真实峰值" in render_in(event.cause_reason, "zh-hans")


def test_reasons_nest_join_and_pluralise_in_each_language():
    reason = Reason(
        "placement.parts",
        {
            "parts": [
                Reason("placement.cards", {"count": 1}),
                Reason("placement.cards", {"count": 3}),
            ]
        },
    )
    assert render(reason) == "1 card; 3 cards"
    assert render_in(reason, "en") == "1 card; 3 cards"
    assert render_in(reason, "zh-hans") == "1 张卡；3 张卡"
    assert Reason.from_json(reason.to_json()) == Reason(
        "placement.parts", {"parts": [Reason("placement.cards", {"count": 1}),
                                      Reason("placement.cards", {"count": 3})]}
    )  # fmt: skip


def test_a_sentence_stored_before_codes_and_an_unknown_code_still_read():
    assert render("needed 2.0 GiB; true peak") == "needed 2.0 GiB; true peak"
    assert render({"code": "gate.from.the.future", "params": {"n": 1}}).startswith(
        "gate.from.the.future"
    )
    assert render(None) == "" and render({}) == ""


def test_a_code_cannot_be_registered_twice_with_another_message():
    register({"tests.once": "said once"})
    register({"tests.once": "said once"})
    with pytest.raises(ValueError):
        register({"tests.once": "said otherwise"})


def test_a_solver_explanation_reads_in_chinese():
    gpus = [{"id": f"h1:{i}", "host": "h1", "memory_mib": 81920, "used_mib": 2048} for i in (0, 1)]
    answer = solve({"gpus": gpus, "models": [{"name": "huge", "memory_mib": 81920}]})
    (left_out,) = answer["unplaced"]
    assert left_out["reason"] == "needs 81920 MiB on one card; largest free is 79872 MiB (h1:0)"
    assert render(left_out["reason_detail"]) == left_out["reason"]
    assert render_in(left_out["reason_detail"], "zh-hans") == (
        "需要单卡 81920 MiB；最大空闲为 79872 MiB（h1:0）"
    )


def test_the_compiled_catalogue_matches_what_gettext_reads(tmp_path):
    po = tmp_path / "django.po"
    po.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
        '"Plural-Forms: nplurals=1; plural=0;\\n"\n\n'
        'msgid "Fleet"\nmsgstr "机群"\n\n'
        '#, fuzzy\nmsgid "Models"\nmsgstr "模型"\n\n'
        'msgid "Untranslated"\nmsgstr ""\n\n'
        'msgctxt "verb"\nmsgid "Apply"\nmsgstr "应用"\n\n'
        'msgid "%(n)s card"\nmsgid_plural "%(n)s cards"\nmsgstr[0] "%(n)s 张"\n"卡"\n'
    )
    entries = catalogue.read_po(po)
    assert [e.msgid for e in entries if e.msgid and not e.translated] == ["Models", "Untranslated"]
    catalogue.write_mo(entries, tmp_path / "django.mo")
    with open(tmp_path / "django.mo", "rb") as mo:
        read = gettext.GNUTranslations(mo)
    assert read.gettext("Fleet") == "机群"
    assert read.gettext("Models") == "Models"  # fuzzy: left out, as msgfmt does
    assert read.pgettext("verb", "Apply") == "应用"
    assert read.ngettext("%(n)s card", "%(n)s cards", 5) == "%(n)s 张卡"


def test_the_catalogues_in_the_checkout_are_complete():
    """What `make test`'s makemessages check asks, for the strings already extracted."""
    assert catalogue.untranslated() == {}


@pytest.mark.django_db
def test_chinese_pages_show_dates_in_the_users_profile_time_zone(client_as, personas, oom_host):
    client = client_as("oncall")
    event = Event.objects.get(host=oom_host)
    page = client.get(f"/hosts/{oom_host.name}/", **ZH).content.decode()  # no zone yet: TIME_ZONE
    assert timezone.localtime(event.at, dt.UTC).strftime("%m-%d %H:%M") in page
    do_set_time_zone(
        acting_user=personas["oncall"], time_zone="Asia/Shanghai", source=Preference.Source.CHOSEN
    )
    shanghai = timezone.localtime(event.at, dt.timezone(dt.timedelta(hours=8)))
    page = client.get(f"/hosts/{oom_host.name}/", **ZH).content.decode()
    assert shanghai.strftime("%m-%d %H:%M") in page


def test_unmarked_template_text_is_listed(tmp_path):
    (tmp_path / "page.html").write_text(
        '{% load i18n %}<h1>{% translate "Fleet" %}</h1>\n'
        "<p>{% blocktranslate with n=count %}{{ n }} cards{% endblocktranslate %}</p>\n"
        "<th>Forgotten heading</th>\n"
    )
    found = catalogue.unmarked(tmp_path)
    assert len(found) == 1 and found[0].endswith(":3: Forgotten heading")
