"""Line diffs between two revisions of a note, for the history page."""

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "add", "remove", "context" or "hunk"
    text: str


def diff_lines(old: str, new: str, *, context: int = 3) -> list[DiffLine]:
    lines = []
    for raw in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=context):
        if raw.startswith(("---", "+++")):
            continue
        if raw.startswith("@@"):
            lines.append(DiffLine("hunk", raw))
        elif raw.startswith("+"):
            lines.append(DiffLine("add", raw[1:]))
        elif raw.startswith("-"):
            lines.append(DiffLine("remove", raw[1:]))
        else:
            lines.append(DiffLine("context", raw[1:]))
    return lines
