"""A PEP 517 backend that builds the engine plugin's wheel from this checkout.

Like deploy/agent/wheel_backend.py, and for the same reason (setuptools cannot take files from
outside its project folder without a download), it writes a plain, pure-Python wheel with the
standard library: the modules pyproject.toml's [tool.plugin-wheel.modules] names, under their
names in the wheel, the metadata of its [project] table, its entry points, a RECORD. It runs on
every Python the plugin supports (3.10 on), unlike the agent's.
"""

import base64
import hashlib
import zipfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pyproject.toml's build requirement
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent


def _project() -> tuple[dict, dict]:
    config = tomllib.loads((HERE / "pyproject.toml").read_text())
    return config["project"], config["tool"]["plugin-wheel"]["modules"]


def _metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    lines += [f"Requires-Dist: {requirement}" for requirement in project["dependencies"]]
    return "\n".join(lines) + "\n"


def _entry_points(project: dict) -> str:
    return "".join(
        f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in points.items())
        for group, points in project.get("entry-points", {}).items()
    )


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    project, modules = _project()
    stem = f"{project['name'].replace('-', '_')}-{project['version']}"
    dist_info = f"{stem}.dist-info"
    contents = {name: (CHECKOUT / source).read_bytes() for name, source in modules.items()}
    contents[f"{dist_info}/METADATA"] = _metadata(project).encode()
    contents[f"{dist_info}/entry_points.txt"] = _entry_points(project).encode()
    contents[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: engine-plugin/wheel_backend.py\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [_record_line(name, data) for name, data in contents.items()]
    contents[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,", ""]).encode()
    filename = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / filename, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in contents.items():
            wheel.writestr(name, data)
    return filename
