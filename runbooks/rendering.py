"""Markdown to HTML that is safe to show: no scripts, no event handlers, only safe links.

markdown-it renders CommonMark (raw HTML disabled); nh3 (the Ammonia sanitizer) then strips
anything outside an allow-list, so a bug or a permissive option in the renderer cannot let
script through.
"""

import re

import nh3
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

_NOTE_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")

_ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "td": {"style"}, "th": {"style"}}
_ALLOWED_SCHEMES = {"http", "https", "mailto"}
_ALLOWED_CSS = {"text-align"}

_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(
    ["table", "strikethrough"]
)


def _link_note_slugs(tokens) -> None:
    """Turn `[text](some-note)` into a link to that note's page."""
    for token in tokens:
        if token.children:
            _link_note_slugs(token.children)
        if token.type == "link_open":
            href = token.attrGet("href") or ""
            if _NOTE_SLUG.match(href):
                token.attrSet("href", reverse("runbook-detail", args=[href]))


def render_markdown(text: str) -> SafeString:
    tokens = _markdown.parse(text)
    _link_note_slugs(tokens)
    html = _markdown.renderer.render(tokens, _markdown.options, {})
    clean = nh3.clean(
        html,
        tags=_ALLOWED_TAGS,
        attributes=_ALLOWED_ATTRIBUTES,
        url_schemes=_ALLOWED_SCHEMES,
        filter_style_properties=_ALLOWED_CSS,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(clean)  # sanitized by nh3 just above
