"""README's layout section names the tree as it is: every folder it names exists, and every
top-level folder and every package of `console/` and `inventory/` is named there."""

import re
import subprocess
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
# Entries of the layout block: a name at the start of a line (top level) or indented two
# spaces (one level inside the folder above it), before the two-space gap of its description.
_ENTRY = re.compile(r"^(?P<indent> {0,2})(?P<names>[\w.]+/?(?: [\w.]+/?)*)(?:  |$)")


def _layout_block() -> str:
    readme = (CHECKOUT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```\n", 2)[1]


def named_paths(block: str) -> set[str]:
    """The paths the block names: `inventory/`'s `wire/` as `inventory/wire`."""
    paths, parent = set(), ""
    for line in block.splitlines():
        match = _ENTRY.match(line)
        if match is None:
            continue
        for name in match["names"].split():
            name = name.rstrip("/")
            if match["indent"]:
                paths.add(f"{parent}/{name}")
            else:
                parent = name
                paths.add(name)
    return paths


def _tracked_top_level_folders() -> set[str]:
    files = subprocess.run(
        ["git", "ls-files"], cwd=CHECKOUT, capture_output=True, text=True, check=True
    ).stdout.split()
    return {f.split("/", 1)[0] for f in files if "/" in f and not f.startswith(".")}


def _packages_inside(package: str) -> set[str]:
    return {
        f"{package}/{child.name}"
        for child in (CHECKOUT / package).iterdir()
        if child.is_dir() and (child / "__init__.py").exists()
    }


def test_the_entries_are_read_at_both_depths():
    block = "console/     the project\n  core/      shared\ninventory/\n  views/ api/  pages\n"
    assert named_paths(block) == {"console", "console/core", "inventory", "inventory/views",
                                  "inventory/api"}  # fmt: skip


def test_everything_the_layout_names_exists():
    missing = sorted(
        path for path in named_paths(_layout_block()) if not (CHECKOUT / path).exists()
    )
    assert missing == []


@pytest.mark.parametrize("package", ["console", "inventory"])
def test_every_package_inside_the_apps_is_named(package):
    assert sorted(_packages_inside(package) - named_paths(_layout_block())) == []


def test_every_top_level_folder_is_named():
    assert sorted(_tracked_top_level_folders() - named_paths(_layout_block())) == []
