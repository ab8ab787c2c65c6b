"""The partition test with its documented cut: three hosts in network namespaces, one link
down for --cut seconds (120 by default), its figures as JSON. Needs root (ip netns).

    python tests/bench/bench_partition.py [--cut 120] [--json OUT]
"""

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cut", type=float, default=120.0, help="seconds the link is down")
    parser.add_argument("--json", default=str(Path(tempfile.gettempdir()) / "partition.json"))
    args = parser.parse_args()
    env = {**os.environ, "PARTITION_CUT_S": f"{args.cut:g}", "PARTITION_REPORT": args.json}
    test = "tests/deploy/test_partition.py"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", test]
    return subprocess.run(argv, cwd=BASE_DIR, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
