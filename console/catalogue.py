"""The translation catalogues: compile them, and check that they hold every marked string.

    python -m console.catalogue compile   locale/*/LC_MESSAGES/*.po -> .mo (pure Python)
    python -m console.catalogue check     makemessages, then fail on any string without a
                                          translation (or marked fuzzy), naming each
    python -m console.catalogue unmarked  template lines with English text outside
                                          {% translate %} / {% blocktranslate %} (a hint list)

``compile`` needs no gettext tools, so `make run` and the tests build the .mo files on any
machine (they are not committed). ``check`` runs Django's makemessages, which needs GNU
gettext (``apt-get install gettext``; .ci/run installs it). When it finds a gap it leaves the
updated .po in place, the new strings with an empty msgstr, ready to be translated; when there
is none it puts the catalogues back as they were, so that a passing check changes no file. It
also runs msgfmt --check-format: a translation that drops or renames a placeholder fails.
"""

from __future__ import annotations

import ast
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
LOCALE_DIR = BASE_DIR / "locale"
LANGUAGES = ("zh_Hans",)
DOMAINS = ("django", "djangojs")
# What makemessages must not read: other trees, and the checkout's own generated folders.
IGNORED = (".venv", "var", "tests", "test-artifacts", "staticfiles", "locale", "static/vendor")


@dataclass
class Entry:
    msgid: str = ""
    msgid_plural: str | None = None
    msgctxt: str | None = None
    msgstr: dict[int, str] = field(default_factory=dict)
    fuzzy: bool = False
    obsolete: bool = False

    @property
    def translated(self) -> bool:
        return bool(self.msgstr) and all(self.msgstr.values()) and not self.fuzzy


def read_po(path: Path) -> list[Entry]:
    entries: list[Entry] = []
    entry, target = Entry(), None

    def close():
        nonlocal entry, target
        if target is not None:
            entries.append(entry)
        entry, target = Entry(), None

    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            close()
            continue
        if line.startswith("#~"):
            entry.obsolete = True
            line = line[2:].strip()
            if not line or line.startswith("#"):
                continue
        elif line.startswith("#"):
            if line.startswith("#,") and "fuzzy" in line:
                entry.fuzzy = True
            continue
        if line.startswith('"'):
            _append(entry, target, ast.literal_eval(line))
            continue
        keyword, _, value = line.partition(" ")
        if keyword in ("msgctxt", "msgid") and target not in (None, "msgctxt"):
            close()
        target = keyword
        if keyword.startswith("msgstr["):
            target = ("msgstr", int(keyword[7:-1]))
        elif keyword == "msgstr":
            target = ("msgstr", 0)
        _append(entry, target, ast.literal_eval(value), start=True)
    close()
    return entries


def _append(entry: Entry, target, text: str, start: bool = False) -> None:
    if isinstance(target, tuple):
        entry.msgstr[target[1]] = ("" if start else entry.msgstr.get(target[1], "")) + text
    elif target == "msgid_plural":
        entry.msgid_plural = ("" if start else entry.msgid_plural or "") + text
    elif target == "msgctxt":
        entry.msgctxt = ("" if start else entry.msgctxt or "") + text
    else:
        entry.msgid = ("" if start else entry.msgid) + text


def write_mo(entries: list[Entry], path: Path) -> None:
    """GNU .mo, as msgfmt writes it: untranslated and fuzzy entries left out (the header kept)."""
    pairs = {}
    for entry in entries:
        if entry.obsolete or (entry.msgid and not entry.translated):
            continue
        key = entry.msgid if entry.msgid_plural is None else f"{entry.msgid}\0{entry.msgid_plural}"
        if entry.msgctxt is not None:
            key = f"{entry.msgctxt}\4{key}"
        pairs[key.encode()] = "\0".join(entry.msgstr[i] for i in sorted(entry.msgstr)).encode()
    keys = sorted(pairs)
    offsets, ids, strs = [], b"", b""
    for key in keys:
        offsets.append((len(ids), len(key), len(strs), len(pairs[key])))
        ids += key + b"\0"
        strs += pairs[key] + b"\0"
    start_of_ids = 7 * 4 + 16 * len(keys)
    start_of_strs = start_of_ids + len(ids)
    table = b""
    for id_offset, id_length, _, _ in offsets:
        table += struct.pack("<2I", id_length, start_of_ids + id_offset)
    for _, _, str_offset, str_length in offsets:
        table += struct.pack("<2I", str_length, start_of_strs + str_offset)
    header = struct.pack(
        "<7I", 0x950412DE, 0, len(keys), 7 * 4, 7 * 4 + 8 * len(keys), 0, start_of_strs
    )
    path.write_bytes(header + table + ids + strs)


def catalogues() -> list[Path]:
    return [
        LOCALE_DIR / language / "LC_MESSAGES" / f"{domain}.po"
        for language in LANGUAGES
        for domain in DOMAINS
    ]


def compile_catalogues() -> None:
    for po in catalogues():
        write_mo(read_po(po), po.with_suffix(".mo"))


def makemessages() -> None:
    ignore = [f"--ignore={folder}" for folder in IGNORED]
    for domain in DOMAINS:
        subprocess.run(
            [sys.executable, "manage.py", "makemessages", "--domain", domain, "--no-obsolete",
             "--add-location=file", *[f"--locale={language}" for language in LANGUAGES], *ignore],
            cwd=BASE_DIR, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip


def untranslated() -> dict[Path, list[str]]:
    gaps = {}
    for po in catalogues():
        missing = [entry.msgid for entry in read_po(po) if entry.msgid and not entry.translated]
        if missing:
            gaps[po] = missing
    return gaps


def _formats_agree() -> bool:
    """msgfmt's own check: every translation keeps its msgid's placeholders."""
    agree = True
    for po in catalogues():
        found = subprocess.run(
            ["msgfmt", "--check-format", "--output-file=/dev/null", str(po)],
            capture_output=True,
            text=True,
        )
        if found.returncode != 0:
            print(f"catalogue: placeholders differ in {po.relative_to(BASE_DIR)}:\n{found.stderr}")
            agree = False
    return agree


def check() -> int:
    if shutil.which("xgettext") is None:
        print("catalogue: GNU gettext is not installed (apt-get install gettext): NOT CHECKED")
        return 0
    with tempfile.TemporaryDirectory() as saved:
        backup = Path(saved) / "locale"
        shutil.copytree(LOCALE_DIR, backup)
        makemessages()
        gaps = untranslated()
        if not gaps and not _formats_agree():
            return 1
        if not gaps:
            shutil.rmtree(LOCALE_DIR)
            shutil.copytree(backup, LOCALE_DIR)
            print("catalogue: every marked string is translated")
            return 0
    for po, missing in gaps.items():
        where = po.relative_to(BASE_DIR)
        print(f"catalogue: {len(missing)} marked string(s) untranslated in {where}:")
        for msgid in missing:
            print(f"  {msgid!r}")
    print("catalogue: the .po files now hold them with an empty msgstr: translate, then re-run")
    return 1


_MARKED = re.compile(r"{% (?:block)?translate\b.*?%}(?:.*?{% end(?:block)?translate %})?", re.S)
_TAGS = re.compile(r"{%.*?%}|{{.*?}}|<[^>]*>", re.S)
_WORD = re.compile(r"[A-Za-z][A-Za-z'’]+")


def unmarked(templates: Path = BASE_DIR / "templates") -> list[str]:
    """Lines whose text (tags, variables and marked strings taken out) still has English words.

    A hint for the translator, not a check: a product name or a kept term (MPS, P99) shows too.
    """
    found = []
    for path in sorted(templates.rglob("*.html")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            words = _WORD.findall(_TAGS.sub(" ", _MARKED.sub(" ", line)))
            if words:
                where = path.relative_to(templates.parent)
                found.append(f"{where}:{number}: {' '.join(words)}")
    return found


def main(argv: list[str]) -> int:
    if argv == ["compile"]:
        compile_catalogues()
        return 0
    if argv == ["check"]:
        return check()
    if argv == ["unmarked"]:
        print("\n".join(unmarked()))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
