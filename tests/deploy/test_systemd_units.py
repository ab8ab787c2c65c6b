"""The service units pass `systemd-analyze verify` with not one warning, and keep the agent's
hardening: what a unit file gets wrong, systemd only warns about and ignores."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
CHECKOUT = Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")


def _unit(name: str) -> dict[str, list[str]]:
    """A unit's [Service] settings, each with every value it is given (keys may repeat)."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in (UNITS / name).read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


@pytest.fixture
def installed_units(tmp_path) -> Path:
    """The units as installed: their /opt paths pointed at this checkout and its virtualenv,
    so that verify finds every program they start."""
    venv = Path(sys.prefix)
    for unit in UNITS.iterdir():
        text = unit.read_text()
        text = text.replace("/opt/gpu-console-agent", str(venv))
        text = text.replace("/opt/gpu-console/.venv", str(venv))
        text = text.replace("/opt/gpu-console", str(CHECKOUT))
        (tmp_path / unit.name).write_text(text)
    return tmp_path


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (no systemd here)")
def test_every_unit_verifies_without_a_warning(installed_units):
    names = sorted(path.name for path in installed_units.iterdir())
    assert "gpu-console-ingest@.service" in names
    # A template verifies through its instances: two ingest workers, as the target starts.
    wanted = [name for name in names if "@." not in name]
    wanted += ["gpu-console-ingest@1.service", "gpu-console-ingest@2.service"]
    result = subprocess.run(
        [ANALYZE, "verify", "--man=no", *wanted],
        cwd=installed_units,
        env={"SYSTEMD_UNIT_PATH": f"{installed_units}:", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed (no systemd here)")
def test_every_service_scores_as_exposed_as_at_most_2_5_in_systemds_security_analysis(
    installed_units,
):
    """systemd's own 0-10 exposure score (10: no sandboxing at all); --threshold is tenfold."""
    services = sorted(path.name for path in installed_units.glob("*.service"))
    result = subprocess.run(
        [ANALYZE, "security", "--offline=yes", "--threshold=25", "--no-pager", *services],
        cwd=installed_units,
        capture_output=True,
        text=True,
        timeout=60,
    )
    scores = [line for line in result.stdout.splitlines() if "Overall exposure" in line]
    assert len(scores) == len(services)
    assert result.returncode == 0, "\n".join(scores)


def test_the_agent_unit_holds_only_cap_syslog_and_reaches_only_its_state_and_the_gpus():
    agent = _unit("gpu-console-agent.service")
    # CAP_SYSLOG for /dev/kmsg's Xids (test_signal_privileges.py), and ProtectKernelLogs=yes
    # would take that away again; nothing more, and no way to gain more.
    assert agent["CapabilityBoundingSet"] == ["CAP_SYSLOG"]
    assert agent["AmbientCapabilities"] == ["CAP_SYSLOG"]
    assert agent["ProtectKernelLogs"] == ["no"]
    assert agent["NoNewPrivileges"] == ["yes"]
    assert agent["ProtectSystem"] == ["strict"]
    assert agent["DevicePolicy"] == ["closed"]
    assert set(agent["DeviceAllow"]) == {"char-nvidia-frontend rw", "char-nvidia-caps r"}
    # engines' allocator snapshots (AGENT_ALLOCATOR_DIR's default), read, never written
    assert "-/run/gpu-console/allocator" in agent["ReadOnlyPaths"]
    assert agent["StateDirectory"] == ["gpu-console-agent"]
    assert "AGENT_STATE_DIR=%S/gpu-console-agent" in agent["Environment"]
    # The secret arrives as a credential, readable by this service alone.
    assert agent["LoadCredential"] == ["agent.secret:/etc/gpu-console/agent.secret"]
    assert "AGENT_SECRET_FILE=%d/agent.secret" in agent["Environment"]
    assert agent["ExecStart"][0].split()[1:3] == ["-m", "inventory.agent"]
    assert "User" in agent and agent["User"] != ["root"]


def test_the_central_units_run_one_beat_and_templated_ingest_workers_after_the_release():
    release = _unit("gpu-console-release.service")
    assert [line.split()[-2:] for line in release["ExecStart"]][:2] == [
        ["migrate", "--noinput"],
        ["collectstatic", "--noinput"],
    ]
    for name in ("web", "ingest@", "worker", "beat"):
        text = (UNITS / f"gpu-console-{name}.service").read_text()
        assert "Requires=gpu-console-release.service" in text
        assert "After=gpu-console-release.service" in text
    assert "manage.py ingest_worker" in _unit("gpu-console-ingest@.service")["ExecStart"][0]
    assert " beat " in _unit("gpu-console-beat.service")["ExecStart"][0]
    assert "beat@" not in " ".join(path.name for path in UNITS.iterdir()), "beat is one unit"
