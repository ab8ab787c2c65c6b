"""Runbook Markdown is rendered safely, whatever an editor types."""

from html.parser import HTMLParser

import pytest

from runbooks.rendering import render_markdown

HOSTILE = [
    "<script>alert(1)</script>",
    "<SCRIPT SRC=//evil.example/x.js></SCRIPT>",
    "<img src=x onerror=alert(1)>",
    '<a href="#" onclick="alert(1)">click</a>',
    "<svg onload=alert(1)>",
    "<iframe src=javascript:alert(1)></iframe>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "<details open ontoggle=alert(1)>",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](  javascript:alert(1))",
    "[click](java&#x73;cript:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](vbscript:msgbox(1))",
    "![x](javascript:alert(1))",
    '[x](https://example.org "title" onmouseover="alert(1)")',
    "<<script>script>alert(1)<</script>/script>",
    "```html\n<script>alert(1)</script>\n```",
]


class _Elements(HTMLParser):
    """Collects the tags and attributes a browser would build from the HTML."""

    def __init__(self):
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, {name: value or "" for name, value in attrs}))


SAFE_SCHEMES = ("http://", "https://", "mailto:", "/", "#")


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_markdown_renders_inert(text):
    parser = _Elements()
    parser.feed(render_markdown(text))
    for tag, attrs in parser.elements:
        assert tag not in {"script", "iframe", "svg", "img", "object", "embed", "style", "details"}
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "style" not in attrs or "url(" not in attrs["style"]
        for name in ("href", "src"):
            if name in attrs:
                assert attrs[name].strip().lower().startswith(SAFE_SCHEMES), attrs


def test_dangerous_link_loses_its_href_but_keeps_its_text():
    html = render_markdown("[run this](javascript:alert(1))")
    assert "run this" in html
    assert "href" not in html


def test_code_blocks_show_markup_as_text():
    html = render_markdown("```\n<script>alert(1)</script>\n```")
    assert "&lt;script&gt;" in html


def test_safe_markdown_survives():
    html = render_markdown(
        "# Steps\n\n1. Drain **chat-large**\n2. Run `nvidia-smi`\n\n"
        "| card | free |\n|---|---|\n| 0 | 12 GiB |\n\n"
        "See [NVIDIA MPS](https://docs.nvidia.com/deploy/mps/index.html)."
    )
    assert "<h1>Steps</h1>" in html
    assert "<strong>chat-large</strong>" in html
    assert "<code>nvidia-smi</code>" in html
    assert "<table>" in html and "<td>12 GiB</td>" in html
    assert 'href="https://docs.nvidia.com/deploy/mps/index.html"' in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_a_bare_slug_links_to_that_note():
    html = render_markdown("Read [OOM triage](oom-triage) first.")
    assert 'href="/runbooks/oom-triage/"' in html


def test_relative_paths_that_are_not_slugs_are_left_alone():
    html = render_markdown("[log](/hosts/infer-01/) and [up](../x)")
    assert 'href="/hosts/infer-01/"' in html
    assert 'href="../x"' in html
