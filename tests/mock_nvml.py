"""NVIDIA's own mock of the NVML C library (tests/fixtures/mocknvml, see its README), for tests
that run the real nvidia-ml-py path in a process of their own.

The library is found through LD_LIBRARY_PATH, which the loader reads when a process starts, so
only a child process can load it. Each test gets a folder of its own with the library unpacked
and a copy of the config, so an `overrides.yaml` it writes is read by its own processes alone.
"""

import gzip
import os
import shutil
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parent.parent
VENDORED = CHECKOUT / "tests" / "fixtures" / "mocknvml"
LIBRARY = VENDORED / "libnvidia-ml.so.550.163.01.gz"


class MockNvml:
    """A folder with the library and a config: `env` lets a child process load them."""

    def __init__(self, folder: Path, config: str) -> None:
        self.folder = folder
        (folder / "lib").mkdir()
        with gzip.open(LIBRARY) as packed, open(folder / "lib" / "libnvidia-ml.so.1", "wb") as lib:
            shutil.copyfileobj(packed, lib)
        self.config = folder / "config.yaml"
        self.config.write_text(config)
        self.overrides = folder / "overrides.yaml"

    @property
    def env(self) -> dict[str, str]:
        library_path = os.pathsep.join(
            p for p in (str(self.folder / "lib"), os.environ.get("LD_LIBRARY_PATH")) if p
        )
        return {
            "LD_LIBRARY_PATH": library_path,
            "MOCK_NVML_CONFIG": str(self.config),
            "MOCK_NVML_OVERRIDES": str(self.overrides),
        }

    def override(self, text: str) -> None:
        """Change what the mock serves while the agent runs (re-read every second)."""
        partial = self.overrides.with_suffix(".partial")
        partial.write_text(text)
        partial.replace(self.overrides)


@pytest.fixture
def mock_nvml(tmp_path):
    """A mock NVML serving NVIDIA's example config (two A100 80GB, one with a process)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the vendored mock NVML is built for x86_64 Linux")
    return MockNvml(tmp_path, (VENDORED / "example-config.yaml").read_text())
