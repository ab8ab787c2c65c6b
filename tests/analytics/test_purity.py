import subprocess
import sys
from pathlib import Path

import inventory.analytics

MODULES = sorted(
    f"inventory.analytics.{path.stem}"
    for path in Path(inventory.analytics.__file__).parent.glob("*.py")
    if path.stem != "__init__"
)


def test_analytics_import_nothing_outside_the_standard_library():
    # A fresh interpreter, so that Django loaded by other test packages cannot hide an import.
    code = (
        "import sys\n"
        + "".join(f"import {module}\n" for module in MODULES)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'numpy'}))"
    )
    root = Path(inventory.analytics.__file__).parents[2]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert len(MODULES) >= 12
    assert result.stdout.strip() == "[]"
