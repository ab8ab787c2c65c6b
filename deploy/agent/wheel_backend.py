"""A PEP 517 backend that builds the agent's wheel from this checkout, with no dependency.

setuptools would need its `wheel` companion and a download (build isolation) to build a wheel
from files outside its project folder; this needs the standard library only, so `pip install
./deploy/agent` works offline. It writes a plain, pure-Python wheel: the files pyproject.toml's
[tool.agent-wheel] names, the metadata of its [project] table, a console script, a RECORD.
"""

import base64
import hashlib
import tomllib
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent


def _project() -> tuple[dict, dict]:
    config = tomllib.loads((HERE / "pyproject.toml").read_text())
    return config["project"], config["tool"]["agent-wheel"]


def _files(selection: dict) -> list[Path]:
    """Checkout-relative paths of every file the wheel holds, packages' __init__.py included."""
    chosen: set[Path] = set()
    for folder in selection["folders"]:
        chosen.update(
            path.relative_to(CHECKOUT)
            for path in (CHECKOUT / folder).rglob("*")
            if path.is_file() and "__pycache__" not in path.parts
        )
    chosen.update(Path(module) for module in selection["modules"])
    for path in list(chosen):
        for parent in path.parents:
            if parent != Path(".") and (CHECKOUT / parent / "__init__.py").exists():
                chosen.add(parent / "__init__.py")
    return sorted(chosen)


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


def _wheel_name(project: dict) -> str:
    return f"{project['name'].replace('-', '_')}-{project['version']}"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None) -> str:
    project, selection = _project()
    stem = _wheel_name(project)
    dist_info = f"{stem}.dist-info"
    contents = {str(path): (CHECKOUT / path).read_bytes() for path in _files(selection)}
    scripts = "".join(f"{name} = {target}\n" for name, target in project["scripts"].items())
    contents[f"{dist_info}/METADATA"] = _metadata(project).encode()
    contents[f"{dist_info}/entry_points.txt"] = f"[console_scripts]\n{scripts}".encode()
    contents[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: agent/wheel_backend.py\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n"
    )
    record = [_record_line(name, data) for name, data in contents.items()]
    contents[f"{dist_info}/RECORD"] = "\n".join([*record, f"{dist_info}/RECORD,,", ""]).encode()
    filename = f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / filename, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in contents.items():
            wheel.writestr(name, data)
    return filename
