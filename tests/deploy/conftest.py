"""The agent's own install, once per test session: its wheel in a fresh virtualenv.

Offline: the wheel builds with the standard library (deploy/agent/wheel_backend.py), and its
dependencies are linked from this checkout's virtualenv, only those the wheel's requirements
reach (`pip check` in test_agent_install proves them complete).
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

AGENT = Path(__file__).resolve().parents[2] / "deploy" / "agent"
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


def _requirements_closure(requirements: list[str]) -> set[str]:
    """Every distribution the requirements reach in this interpreter, extras followed."""
    seen: set[str] = set()
    todo = [(Requirement(text), "") for text in requirements]
    while todo:
        requirement, extra = todo.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        dist = importlib.metadata.distribution(requirement.name)
        for wanted in requirement.extras or {""}:
            key = f"{dist.metadata['Name'].lower()}[{wanted}]"
            if key in seen:
                continue
            seen.add(key)
            todo += [(Requirement(text), wanted) for text in dist.requires or []]
    return {key.split("[")[0] for key in seen}


def _link_distribution(name: str, site_packages: Path) -> None:
    """A distribution of this virtualenv made visible in another, files and metadata alike."""
    dist = importlib.metadata.distribution(name)
    here = Path(dist.locate_file(""))
    for top in {Path(str(file)).parts[0] for file in dist.files or []} - {".."}:
        target = site_packages / top
        if not target.exists() and (here / top).exists():
            target.symlink_to(here / top)


@pytest.fixture(scope="session")
def agent_venv() -> Path:
    # Not under pytest's own temporary folder (0700): the agent runs as the unit's user too.
    root = Path(tempfile.mkdtemp(prefix="agent-install-"))
    root.chmod(0o755)
    yield from _installed_into(root)
    shutil.rmtree(root, ignore_errors=True)


def _installed_into(root: Path):
    subprocess.run([*PIP, "wheel", "--no-deps", "-q", "-w", root / "wheels", AGENT], check=True)
    (wheel,) = (root / "wheels").glob("gpu_colocation_agent-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*PIP, "--python", python, "install", "-q", "--no-deps", "--no-index", wheel], check=True
    )
    site_packages = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    assert site_packages != Path(sysconfig.get_path("purelib"))
    requirements = tomllib.loads((AGENT / "pyproject.toml").read_text())["project"]
    for name in _requirements_closure(requirements["dependencies"]):
        _link_distribution(name, site_packages)
    yield venv


def clean_env(**extra: str) -> dict[str, str]:
    """No path back into the checkout, no setting of the test run."""
    # The ingest queue is the run's own under xdist (tests/xdist_worker.py): an agent and the
    # ingest worker of one test must agree on it.
    keep = {"PATH", "HOME", "LANG", "TMPDIR", "INGEST_QUEUE_NAME"}
    return {**{k: v for k, v in os.environ.items() if k in keep}, **extra}
