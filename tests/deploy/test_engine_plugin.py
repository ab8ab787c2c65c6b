"""The engine plugin installs alone into an engine's environment: its wheel, no dependency, no
part of the console, on the Pythons vLLM images ship (3.10 to 3.13)."""

import ast
import json
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


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("engine-plugin")
    subprocess.run([*PIP, "wheel", "--no-deps", "-q", "-w", root / "wheels", PLUGIN], check=True)
    (wheel,) = (root / "wheels").glob("gpu_colocation_allocator_exporter-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    subprocess.run(
        [*PIP, "--python", venv / "bin" / "python", "install", "-q", "--no-deps", "--no-index",
         wheel],
        check=True,
    )  # fmt: skip
    return venv


def test_vllm_finds_the_plugin_and_it_publishes_without_the_console(plugin_venv, tmp_path):
    folder, stats = tmp_path / "allocator", tmp_path / "stats.json"
    folder.mkdir()
    stats.write_text(json.dumps(STATS))
    # What vLLM's load_general_plugins does: each entry point of the group, loaded and called.
    probe = (
        "import importlib.metadata, importlib.util, json, os\n"
        "(point,) = importlib.metadata.entry_points(group='vllm.general_plugins')\n"
        "point.load()()\n"
        "absent = [n for n in ('django', 'celery', 'ortools', 'inventory')\n"
        "          if importlib.util.find_spec(n) is not None]\n"
        "print(json.dumps([point.name, absent, os.listdir(os.environ['ALLOCATOR_EXPORTER_DIR'])]))"
    )
    result = subprocess.run(
        [plugin_venv / "bin" / "python", "-c", probe],
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
    name, absent, published = json.loads(result.stdout)
    assert (name, absent) == ("allocator_exporter", [])
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
