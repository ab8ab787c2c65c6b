"""The default library in Simplified Chinese: one translation per note, linked both ways."""

import re

import pytest

from runbooks.library import load_library, translation_slugs
from runbooks.models import RunbookNote

CHINESE = re.compile(r"[\u4e00-\u9fff]")
# The terms of docs/glossary-zh.md that the library must use, one word per concept.
GLOSSARY = ("显存", "碎片", "混部", "闸门", "值班", "审批")


def _pairs():
    english = {note.slug: note for note in load_library()}
    chinese = load_library(language="zh-hans")
    return [(english[note.translation_of], note) for note in chinese]


def test_every_english_note_has_one_chinese_translation():
    english = {note.slug for note in load_library()}
    chinese = load_library(language="zh-hans")
    assert sorted(note.translation_of for note in chinese) == sorted(english)
    for note in chinese:
        assert note.slug == translation_slugs(note.translation_of)[1]


def test_each_translation_keeps_the_tags_commands_and_figures():
    for english, chinese in _pairs():
        assert chinese.tags == english.tags, chinese.slug
        assert len(CHINESE.findall(chinese.body)) >= 500, chinese.slug
        assert f"]({english.slug})" in chinese.body, "links back to the English note"
        # Commands and figures are not translated: every code block and number survives.
        for block in re.findall(r"```\w*\n(.*?)```", english.body, re.S):
            assert block in chinese.body, (chinese.slug, block[:60])
        for figure in set(re.findall(r"\b\d+(?:\.\d+)?\b", english.body)):
            assert figure in chinese.body, (chinese.slug, figure)


def test_links_between_notes_stay_in_chinese():
    slugs = {note.slug for note in load_library(language="zh-hans")}
    for _, chinese in _pairs():
        for target in re.findall(r"\]\(([a-z0-9-]+)\)", chinese.body):
            assert target in slugs or target == chinese.translation_of, (chinese.slug, target)


def test_the_glossary_terms_are_the_ones_used():
    text = "".join(note.body for note in load_library(language="zh-hans"))
    for term in GLOSSARY[:4]:
        assert term in text
    # One Chinese word per concept: the rejected synonyms do not appear.
    for rejected in ("内存", "碎片化", "门控", "共置"):
        assert rejected not in text


@pytest.mark.django_db
def test_the_chinese_notes_are_installed_and_the_pages_link_both_ways(client_as):
    installed = RunbookNote.objects.filter(from_library=True, slug__endswith="-zh")
    assert installed.count() == len(load_library(language="zh-hans"))
    client = client_as("oncall")
    english = client.get("/runbooks/oom-triage/").content.decode()
    assert 'href="/runbooks/oom-triage-zh/"' in english and "简体中文版" in english
    chinese = client.get("/runbooks/oom-triage-zh/").content.decode()
    assert 'href="/runbooks/oom-triage/"' in chinese and "English version" in chinese
    assert "真实峰值" in chinese
