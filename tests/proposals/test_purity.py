"""The workflow's logic stays in plain modules: no Django, no Celery, no database."""

import ast
import sys
from pathlib import Path

import pytest

import console.proposals

PURE = [
    "transitions.py",
    "loadtests.py",
    "placement_change.py",
    "gates/__init__.py",
    "gates/memory.py",
    "gates/kv.py",
    "gates/isolation.py",
    "gates/loadtest.py",
]
ALLOWED_PREFIXES = ("console.proposals.gates", "console.proposals.loadtests", "inventory.analytics")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_modules_import_only_the_standard_library_and_pure_analytics(module):
    root = Path(console.proposals.__file__).parent
    outside = {
        name
        for name in _imports(root / module)
        if name.split(".")[0] not in sys.stdlib_module_names
        and not name.startswith(ALLOWED_PREFIXES)
    }
    assert outside == set(), f"{module} imports {sorted(outside)}"
