"""The log scanner against the corpus of real log blocks (tests/fixtures/engine-logs/corpus/).

    python -m tests.inventory.agent.logscan_corpus [--verbose]

prints, per engine, how many blocks the corpus has, how many the scanner reads right (every
event the block expects, in order, with the fields it names, and nothing else), how many
wrong, and how many false OOMs (an OOM from a block that expects none). `--verbose` also
shows what each wrong block gave.

Each block is read as the agent reads its source: an engine log by a `LogScanner` that is not
told the engine (the corpus has no plan entry to name it), a kernel log (`kernel*.log`) by the
`LogScanner("kernel")` of the kernel-log source; a fresh scanner per block, every line fed in
order, then flushed as when the log goes quiet.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from inventory.agent.logscan import LogEvent, LogScanner

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "engine-logs" / "corpus"
_SOURCE = "# source:"
_EXPECT = "# expect:"


@dataclass(frozen=True, slots=True)
class Expected:
    kind: str  # "none": the block gives no event
    fields: dict[str, str]


@dataclass(slots=True)
class Block:
    file: str
    line: int  # of its `# source:` line
    source: str
    expected: list[Expected] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def engine(self) -> str:
        """The engine the block is counted under: its first expectation's, else unknown."""
        for expected in self.expected:
            if "engine" in expected.fields:
                return expected.fields["engine"]
        return "unknown"

    @property
    def events_expected(self) -> list[Expected]:
        return [e for e in self.expected if e.kind != "none"]


def parse(path: Path) -> list[Block]:
    blocks: list[Block] = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if raw.startswith(_SOURCE):
            blocks.append(Block(path.name, number, raw.removeprefix(_SOURCE).strip()))
        elif not blocks:
            continue  # the file's header
        elif raw.startswith(_EXPECT):
            kind, *pairs = raw.removeprefix(_EXPECT).split()
            blocks[-1].expected.append(Expected(kind, dict(p.split("=", 1) for p in pairs)))
        elif not raw.startswith("# "):
            blocks[-1].lines.append(raw)
    return blocks


def corpus_blocks(corpus: Path = CORPUS) -> list[Block]:
    return [block for path in sorted(corpus.glob("*.log")) for block in parse(path)]


def scan(block: Block) -> list[LogEvent]:
    scanner = LogScanner("kernel" if block.file.startswith("kernel") else None)
    events = [event for raw in block.lines for event in scanner.feed(raw)]
    events += scanner.flush()
    return sorted(events, key=lambda event: event.line)


def mismatches(block: Block, events: list[LogEvent]) -> list[str]:
    """What differs from the block's expectations; empty when the scanner read it right."""
    wanted = block.events_expected
    problems = []
    if len(events) != len(wanted):
        problems.append(f"{len(events)} events, expected {len(wanted)}")
    for position, (expected, event) in enumerate(zip(wanted, events, strict=False), start=1):
        got = {k: str(v) for k, v in event.as_dict().items()}
        if event.kind != expected.kind:
            problems.append(f"event {position}: kind {event.kind}, expected {expected.kind}")
        for key, value in expected.fields.items():
            if got.get(key) != value:
                problems.append(f"event {position}: {key}={got.get(key)}, expected {value}")
    return problems


def false_oom(block: Block, events: list[LogEvent]) -> bool:
    """An OOM from a block that expects no OOM at all."""
    return not any(e.kind == "oom" for e in block.expected) and any(
        event.kind == "oom" for event in events
    )


@dataclass(slots=True)
class Tally:
    blocks: int = 0
    right: int = 0
    false_ooms: int = 0

    @property
    def wrong(self) -> int:
        return self.blocks - self.right


def tally(blocks: list[Block]) -> dict[str, Tally]:
    by_engine: dict[str, Tally] = {}
    for block in blocks:
        events = scan(block)
        row = by_engine.setdefault(block.engine, Tally())
        row.blocks += 1
        row.right += not mismatches(block, events)
        row.false_ooms += false_oom(block, events)
    return dict(sorted(by_engine.items()))


def table(by_engine: dict[str, Tally]) -> Iterator[str]:
    yield f"{'engine':<10} {'blocks':>6} {'right':>6} {'wrong':>6} {'false OOMs':>10}"
    total = Tally()
    for engine, row in by_engine.items():
        total.blocks += row.blocks
        total.right += row.right
        total.false_ooms += row.false_ooms
        yield f"{engine:<10} {row.blocks:>6} {row.right:>6} {row.wrong:>6} {row.false_ooms:>10}"
    yield f"{'all':<10} {total.blocks:>6} {total.right:>6} {total.wrong:>6} {total.false_ooms:>10}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.inventory.agent.logscan_corpus")
    parser.add_argument("--verbose", action="store_true", help="show what each wrong block gave")
    args = parser.parse_args(argv)
    blocks = corpus_blocks()
    for line in table(tally(blocks)):
        print(line)
    if args.verbose:
        for block in blocks:
            events = scan(block)
            if problems := mismatches(block, events):
                print(f"\n{block.name} ({block.source})")
                for problem in problems:
                    print(f"  {problem}")
                for event in events:
                    print(f"  got {event.as_dict()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
