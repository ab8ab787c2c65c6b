"""The engine plugin installs alone into an engine's environment: its wheel, no dependency, no
part of the console, on the Pythons vLLM images ship (3.10 to 3.13)."""

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.conftest import PIP, clean_env

CHECKOUT = Path(__file__).resolve().parents[2]
PLUGIN = CHECKOUT / "deploy" / "engine-plugin"
STUB_TORCH = CHECKOUT / "tests" / "inventory" / "agent" / "stub_torch"
STATS = {"0": {"reserved_bytes.all.current": 7 * 2**30}}


# The Pythons vLLM images ship. The suite's own is one; the others are looked for on PATH and in
# pyenv (CI has 3.11 alone: the others are skipped there, saying which).
PYTHONS = ("3.10", "3.11", "3.12", "3.13")


def _interpreter(version: str) -> str | None:
    wanted = tuple(map(int, version.split(".")))
    if sys.version_info[:2] == wanted:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python{version}")]
    candidates += sorted(str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}"))
    for candidate in filter(None, candidates):
        # a pyenv shim of a version not selected fails here, and is passed over
        said = subprocess.run(
            [candidate, "-c", "import sys; print(*sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if said.returncode == 0 and tuple(map(int, said.stdout.split())) == wanted:
            return candidate
    return None


@pytest.fixture(scope="module")
def plugin_wheel(tmp_path_factory) -> Path:
    """Built once, as docs/deploy.md builds it: from the checkout, with the suite's Python."""
    wheels = tmp_path_factory.mktemp("engine-plugin-wheel")
    subprocess.run([*PIP, "wheel", "--no-deps", "-q", "-w", wheels, PLUGIN], check=True)
    (wheel,) = wheels.glob("gpu_colocation_allocator_exporter-*.whl")
    return wheel


def _built_with(python: str, into: Path) -> Path:
    """The wheel built by `python` itself, through the backend's PEP 517 hook (offline: on
    3.11 and later it needs nothing beyond the standard library)."""
    hook = f"import wheel_backend; print(wheel_backend.build_wheel({str(into)!r}))"
    name = subprocess.run(
        [python, "-c", hook], cwd=PLUGIN, capture_output=True, text=True, check=True
    ).stdout.strip()
    return into / name


@pytest.mark.parametrize("version", PYTHONS)
def test_vllm_finds_the_plugin_and_it_publishes_without_the_console(
    version, plugin_wheel, tmp_path
):
    python = _interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} here (PATH or pyenv)")
    wheel = plugin_wheel
    if tuple(map(int, version.split("."))) >= (3, 11):
        (tmp_path / "built").mkdir()
        wheel = _built_with(python, tmp_path / "built")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True)
    # The suite's pip installs into the other interpreter's venv (pip --python): the venv
    # needs no pip of its own, and nothing is fetched.
    subprocess.run(
        [*PIP, "--python", venv / "bin" / "python", "install", "-q", "--no-deps", "--no-index",
         wheel],
        check=True,
    )  # fmt: skip
    folder, stats = tmp_path / "allocator", tmp_path / "stats.json"
    folder.mkdir()
    stats.write_text(json.dumps(STATS))
    # What vLLM's load_general_plugins does: each entry point of the group, loaded and called.
    probe = (
        "import importlib.metadata, importlib.util, json, os, sys\n"
        "(point,) = importlib.metadata.entry_points(group='vllm.general_plugins')\n"
        "point.load()()\n"
        "absent = [n for n in ('django', 'celery', 'ortools', 'inventory')\n"
        "          if importlib.util.find_spec(n) is not None]\n"
        "print(json.dumps([point.name, absent, os.listdir(os.environ['ALLOCATOR_EXPORTER_DIR']),\n"
        "                  '%d.%d' % sys.version_info[:2]]))"
    )
    result = subprocess.run(
        [venv / "bin" / "python", "-c", probe],
        cwd=tmp_path,
        env=clean_env(
            PYTHONPATH=str(STUB_TORCH),  # torch is the engine's
            STUB_TORCH_STATS=str(stats),
            ALLOCATOR_EXPORTER_DIR=str(folder),
            ALLOCATOR_EXPORTER_PORT="0",
        ),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    name, absent, published, ran_on = json.loads(result.stdout)
    assert (name, absent, ran_on) == ("allocator_exporter", [], version)
    assert len(published) == 1 and published[0].endswith(".json")
    assert list(folder.iterdir()) == [], "a clean exit removes its snapshot"


def test_the_plugins_sources_are_python_3_10_and_it_asks_for_nothing():
    config = tomllib.loads((PLUGIN / "pyproject.toml").read_text())
    project, modules = config["project"], config["tool"]["plugin-wheel"]["modules"]
    assert project["requires-python"] == ">=3.10" and project["dependencies"] == []
    for source in [*modules.values(), "deploy/engine-plugin/wheel_backend.py"]:
        ast.parse((CHECKOUT / source).read_text(), source, feature_version=(3, 10))
    # One vLLM plugin: the console's own distribution, which vLLM's Python refuses, has none.
    root = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    assert "vllm.general_plugins" not in root.get("entry-points", {})
