"""The default runbook library: Markdown files in runbooks/library/ with a front-matter block.

---
slug: mps-not-hard-isolation
title: MPS is not hard isolation
tags: mps, isolation
---

Each note has a Simplified Chinese translation beside it, ``<slug>.zh-hans.md``, whose front
matter adds ``language: zh-hans`` and ``translation_of: <the English slug>``; its own slug is
``<slug>-zh``. The note page links each note to its other language (docs/glossary-zh.md holds
the terms the translations use).
"""

from dataclasses import dataclass
from pathlib import Path

LIBRARY_DIR = Path(__file__).resolve().parent / "library"


@dataclass(frozen=True)
class LibraryNote:
    slug: str
    title: str
    tags: tuple[str, ...]
    body: str
    language: str = "en"
    translation_of: str | None = None


class LibraryFormatError(ValueError):
    pass


def parse_note(path: Path) -> LibraryNote:
    text = path.read_text(encoding="utf-8")
    head, sep, body = text.removeprefix("---\n").partition("\n---\n")
    if not text.startswith("---\n") or not sep:
        raise LibraryFormatError(f"{path.name}: missing the front-matter block")
    fields = {}
    for line in head.splitlines():
        key, colon, value = line.partition(":")
        if not colon:
            raise LibraryFormatError(f"{path.name}: front-matter line {line!r} is not key: value")
        fields[key.strip()] = value.strip()
    missing = {"slug", "title", "tags"} - fields.keys()
    if missing:
        raise LibraryFormatError(f"{path.name}: front matter lacks {', '.join(sorted(missing))}")
    tags = tuple(tag.strip() for tag in fields["tags"].split(",") if tag.strip())
    return LibraryNote(
        fields["slug"],
        fields["title"],
        tags,
        body.strip() + "\n",
        fields.get("language", "en"),
        fields.get("translation_of"),
    )


def load_library(directory: Path = LIBRARY_DIR, language: str = "en") -> list[LibraryNote]:
    notes = [parse_note(path) for path in sorted(directory.glob("*.md"))]
    return [note for note in notes if note.language == language]


def translation_slugs(slug: str) -> tuple[str, str]:
    """(English slug, Chinese slug) of a library note, from either of them."""
    english = slug.removesuffix(CHINESE_SUFFIX)
    return english, english + CHINESE_SUFFIX


CHINESE_SUFFIX = "-zh"
