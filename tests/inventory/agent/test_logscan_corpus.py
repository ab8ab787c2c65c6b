"""Every block of the log corpus (tests/fixtures/engine-logs/corpus/) gives exactly the events
its `# expect:` lines name, read as the agent reads it (logscan_corpus.scan)."""

import pytest

from inventory.agent.logscan import _RULES
from tests.conftest import FIXTURES
from tests.inventory.agent.logscan_corpus import (
    Block,
    corpus_blocks,
    false_oom,
    mismatches,
    parse,
    scan,
    table,
    tally,
)

BLOCKS = corpus_blocks()


@pytest.mark.parametrize("block", BLOCKS, ids=[block.name for block in BLOCKS])
def test_each_block_gives_the_events_it_expects(block: Block):
    events = scan(block)
    assert not mismatches(block, events), [event.as_dict() for event in events]
    assert not false_oom(block, events)


def test_every_block_cites_its_source_and_says_what_it_expects():
    assert len(BLOCKS) >= 40
    for block in BLOCKS:
        assert block.source.startswith("https://github.com/"), block.name
        assert block.expected, f"{block.name} has no # expect: line"
        assert block.lines, f"{block.name} has no log line"
        kinds = {expected.kind for expected in block.expected}
        assert "none" not in kinds or kinds == {"none"}, block.name


def test_the_runner_counts_right_wrong_and_false_ooms_by_engine(tmp_path):
    corpus = tmp_path / "corpus.log"
    corpus.write_text(
        "# a header line\n"
        "# source: https://github.com/example/one (an OOM read right)\n"
        "# expect: oom engine=pytorch reason=cuda_oom\n"
        "RuntimeError: CUDA error: out of memory\n"
        "# source: https://github.com/example/two (an advice line the block says is an OOM)\n"
        "# expect: oom engine=vllm reason=cuda_oom\n"
        "If out-of-memory error occurs during cudagraph capture, consider decreasing it.\n"
        "# source: https://github.com/example/three (an OOM where none is expected)\n"
        "# expect: none engine=vllm\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\n",
        encoding="utf-8",
    )
    by_engine = tally(parse(corpus))
    assert {
        engine: (t.blocks, t.right, t.wrong, t.false_ooms) for engine, t in by_engine.items()
    } == {
        "pytorch": (1, 1, 0, 0),
        "vllm": (2, 0, 2, 1),
    }
    assert list(table(by_engine))[-1].split() == ["all", "3", "1", "2", "1"]


def test_docs_list_every_family_of_the_rules_table():
    signals = (FIXTURES.parent.parent / "docs" / "signals.md").read_text(encoding="utf-8")
    for rule in _RULES:
        assert f"`{rule.reason}`" in signals, f"docs/signals.md lacks {rule.kind} {rule.reason}"
