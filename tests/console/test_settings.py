"""Settings, and the commands that need no database, have no side effects.

The probes run in a fresh interpreter with an audit hook that records, and refuses, every
process start and every write to the file system, so a regression fails here without leaving
a database server or a file behind.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.console.placement.support import SCENARIOS

REPOSITORY = Path(__file__).resolve().parents[2]

AUDIT_HOOK = """
import json, os, sys
SPAWNS = {"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
          "os.forkpty", "pty.spawn"}
CHANGES = {"os.mkdir", "os.rename", "os.replace", "os.remove", "os.rmdir", "os.link",
           "os.symlink", "os.truncate", "os.chmod", "os.chown", "os.utime", "shutil.rmtree",
           "shutil.copyfile", "shutil.move"}
WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
side_effects = []

def refuse_side_effects(event, args):
    opens_for_writing = event == "open" and args[2] & WRITING
    if event in SPAWNS or event in CHANGES or opens_for_writing:
        side_effects.append(f"{event} {args[0]!r}")
        raise PermissionError(f"side effect refused by the test: {event} {args[0]!r}")

sys.addaudithook(refuse_side_effects)
try:
{body}
finally:
    print("SIDE EFFECTS " + json.dumps(side_effects))
"""


def side_effects_of(body: str, **env: str) -> list[str]:
    """What running `body` (Python) tried to start or write, with no DATABASE_URL set."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DATABASE_URL", "SECRET_KEY", "SECRET_KEY_FILE", "CELERY_BROKER_URL"}
    }
    # Compiled modules are a write of Python's own, not of the console's.
    environment |= {"PYTHONDONTWRITEBYTECODE": "1", **env}
    indented = "\n".join(f"    {line}" for line in body.strip().splitlines())
    result = subprocess.run(
        [sys.executable, "-c", AUDIT_HOOK.replace("{body}", indented)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPOSITORY,
        timeout=120,
    )
    report = [line for line in result.stdout.splitlines() if line.startswith("SIDE EFFECTS ")]
    assert report, f"the probe did not finish:\n{result.stdout}\n{result.stderr}"
    effects = json.loads(report[-1].removeprefix("SIDE EFFECTS "))
    assert effects or result.returncode == 0, f"the probe failed:\n{result.stderr}"
    return effects


def test_the_probe_sees_a_file_written_and_a_process_started(tmp_path):
    body = f"""
open({str(tmp_path / "written")!r}, "w").close()
import subprocess
subprocess.run(["true"])
"""
    effects = side_effects_of(body)
    assert len(effects) == 1, "the refused write stops the probe before the process starts"
    assert effects[0].startswith("open")
    assert not (tmp_path / "written").exists()
    assert side_effects_of("import subprocess; subprocess.run(['true'])")[0].startswith(
        "subprocess.Popen"
    )


def test_importing_settings_and_setting_up_django_start_nothing_and_write_nothing():
    body = """
import console.settings
import django
os.environ["DJANGO_SETTINGS_MODULE"] = "console.settings"
django.setup()
from django.conf import settings
assert settings.DATABASES["default"]["ENGINE"] == "console.embedded_db"
"""
    assert side_effects_of(body) == []


@pytest.mark.parametrize(
    "command",
    [["check"], ["place", str(SCENARIOS / "seed-3xa100-5models.json")]],
    ids=["check", "place"],
)
def test_a_command_that_needs_no_database_starts_no_database(command):
    body = f"""
import runpy
sys.argv = ["manage.py", *{command!r}]
runpy.run_path("manage.py", run_name="__main__")
"""
    assert side_effects_of(body) == []
