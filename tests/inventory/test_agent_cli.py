"""`python -m inventory.agent`: where each setting comes from, and which queue it listens on."""

import pytest

from inventory.agent.__main__ import configure, parser, queue_name


def _configured(argv: list[str], environ: dict) -> dict:
    configure(parser().parse_args(argv), environ)
    return environ


def test_flags_win_over_the_environment_which_wins_over_the_file(tmp_path):
    config = tmp_path / "agent.env"
    config.write_text(
        "AGENT_HOST=from-file\nAGENT_SOURCE=simulator\nCELERY_BROKER_URL=redis://file:6379/0\n"
        "AGENT_OUTBOX_MAX=100\n# a comment\n"
    )
    environ = _configured(
        ["--config", str(config), "--host", "from-flag"],
        {"AGENT_HOST": "from-env", "CELERY_BROKER_URL": "redis://env:6379/0"},
    )
    assert environ == {
        "AGENT_HOST": "from-flag",
        "AGENT_SOURCE": "simulator",
        "CELERY_BROKER_URL": "redis://env:6379/0",
        "AGENT_OUTBOX_MAX": "100",
    }


def test_the_config_file_may_come_from_the_environment_and_must_exist(tmp_path):
    config = tmp_path / "agent.env"
    config.write_text("AGENT_SECRET_FILE=/etc/gpu-console/agent.secret\n")
    environ = _configured([], {"AGENT_CONFIG_FILE": str(config)})
    assert environ["AGENT_SECRET_FILE"] == "/etc/gpu-console/agent.secret"
    with pytest.raises(SystemExit, match="does not exist"):
        _configured(["--config", str(tmp_path / "missing.env")], {})


def test_a_host_agent_listens_on_its_hosts_queue_and_the_simulator_on_its_own(monkeypatch):
    monkeypatch.setenv("AGENT_SOURCE", "nvml")
    monkeypatch.setenv("AGENT_HOST", "gpu-07")
    assert queue_name(parser().parse_args([])) == "host.gpu-07"
    assert queue_name(parser().parse_args(["--queue", "host.x"])) == "host.x"
    monkeypatch.setenv("AGENT_SOURCE", "simulator")
    assert queue_name(parser().parse_args([])) == "host.simulator"
