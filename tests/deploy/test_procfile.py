"""The Procfile's release step works as written, and its processes are the central side's."""

import shlex
from pathlib import Path

import pytest
from django.core.management import call_command

PROCFILE = Path(__file__).resolve().parents[2] / "Procfile"


def _processes() -> dict[str, str]:
    lines = [line for line in PROCFILE.read_text().splitlines() if line and line[0] != "#"]
    return dict(line.split(": ", 1) for line in lines)


def test_the_procfile_lists_the_release_step_web_ingest_worker_and_beat():
    processes = _processes()
    assert set(processes) == {"release", "web", "ingest", "worker", "beat"}
    release = [shlex.split(step) for step in processes["release"].split("&&")]
    assert [step[2:] for step in release] == [
        ["migrate", "--noinput"],
        ["collectstatic", "--noinput"],
    ]
    assert shlex.split(processes["ingest"])[1:] == ["manage.py", "ingest_worker"]
    assert "console.wsgi" in shlex.split(processes["web"])
    assert shlex.split(processes["beat"])[3:6] == ["-A", "console", "beat"]
    assert "-Q celery" in processes["worker"], "the central worker leaves host queues to agents"


@pytest.mark.django_db
def test_the_release_step_collects_the_static_files_a_front_server_serves(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "static"
    call_command("collectstatic", "--noinput", verbosity=0)
    collected = {path.relative_to(tmp_path / "static").as_posix()
                 for path in (tmp_path / "static").rglob("*") if path.is_file()}  # fmt: skip
    assert any(name.startswith("vendor/plotly/") and name.endswith(".js") for name in collected)
    assert any(name.startswith("admin/") for name in collected)
    assert any(name.endswith(".css") and not name.startswith("admin/") for name in collected)
