"""Run an installed program with what deploy/systemd/gpu-console-agent.service grants it: another
user than root, the unit's capabilities and groups and nothing more, no new privileges (setpriv,
on this machine's kernel).

The interpreter must be reachable by that user. Where it lives under a folder only root may
enter (pyenv under /root, as on the machines the suite runs on), a mount namespace of the
program's own binds the interpreter's installation to a folder the user can reach, and the
agent's virtualenv is pointed at it; the program itself runs unchanged.
"""

from __future__ import annotations

import contextlib
import grp
import os
import sys
from pathlib import Path

UNIT_UID = UNIT_GID = 65534  # nobody: a user that owns nothing of root's


def _reachable_by_others(path: Path) -> bool:
    return all(os.stat(folder).st_mode & 0o001 for folder in (path, *path.parents))


UNIT = Path(__file__).resolve().parents[2] / "deploy" / "systemd" / "gpu-console-agent.service"


def unit_grants() -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The agent unit's capabilities ("syslog") and its supplementary groups that exist here."""
    settings: dict[str, str] = {}
    for line in UNIT.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            settings[key] = value
    capabilities = tuple(
        name.removeprefix("CAP_").lower() for name in settings["AmbientCapabilities"].split()
    )
    assert settings["CapabilityBoundingSet"].split() == settings["AmbientCapabilities"].split()
    groups = []
    for name in settings.get("SupplementaryGroups", "").split():
        with contextlib.suppress(KeyError):
            groups.append(grp.getgrnam(name).gr_gid)
    return capabilities, tuple(groups)


def unit_command(
    venv: Path,
    work: Path,
    capabilities: tuple[str, ...] | None = None,
    groups: tuple[int, ...] | None = None,
) -> tuple[list[str], dict[str, str], str]:
    """(argv that runs the venv's python as the unit's user, environment it needs, who that
    is), with `capabilities` ("syslog") in its bounding, inheritable and ambient sets and
    `groups` as its supplementary groups: by default the unit's own. Not root already: the
    current user is unprivileged, nothing to drop (nor to grant)."""
    if capabilities is None or groups is None:
        unit_capabilities, unit_groups = unit_grants()
        capabilities = unit_capabilities if capabilities is None else capabilities
        groups = unit_groups if groups is None else groups
    python = venv / "bin" / "python"
    if os.geteuid() != 0:
        return [str(python)], {}, f"uid {os.geteuid()} (not root)"
    caps = "".join(f",+{name}" for name in capabilities)
    setpriv = ["setpriv", f"--reuid={UNIT_UID}", f"--regid={UNIT_GID}",
               f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
               f"--inh-caps=-all{caps}", f"--bounding-set=-all{caps}",
               *([f"--ambient-caps=-all{caps}"] if caps else []), "--no-new-privs"]  # fmt: skip
    granted = ", ".join(f"CAP_{name.upper()}" for name in capabilities) or "no capabilities"
    who = f"uid {UNIT_UID}, {granted}, no new privileges"
    base = Path(sys.base_prefix)
    if _reachable_by_others(base):
        return [*setpriv, "--", str(python)], {}, who
    mount = work / "interpreter"
    mount.mkdir(mode=0o755)
    unit_venv = work / "unit-venv"
    (unit_venv / "bin").mkdir(parents=True)
    (unit_venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}").mkdir(parents=True)
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (unit_venv / "lib" / site.parent.name / "site-packages").symlink_to(site)
    interpreter = mount / "bin" / Path(sys.executable).resolve().name
    (unit_venv / "bin" / "python").symlink_to(interpreter)
    (unit_venv / "pyvenv.cfg").write_text(
        f"home = {mount / 'bin'}\ninclude-system-site-packages = false\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\n"
    )
    for path in (work, unit_venv, *unit_venv.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755)
    script = f'mount --bind "{base}" "{mount}" && exec "$@"'
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh",
            *setpriv, "--", str(unit_venv / "bin" / "python")]  # fmt: skip
    # The interpreter finds its libpython through an absolute path under root's folder; the
    # loader would otherwise take the system's (another patch release).
    return argv, {"LD_LIBRARY_PATH": str(mount / "lib")}, who + ", interpreter bind-mounted"
