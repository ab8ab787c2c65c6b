"""Polls through nvidia-ml-py (the real binding) and prints each poll as JSON: run by
test_old_drivers in a process that loads NVIDIA's mock NVML.

    python -m tests.inventory.telemetry.poll_real_nvml --polls 3 --hide SYMBOL ...

--hide takes symbols away from the loaded library, as an older libnvidia-ml.so lacks them:
nvidia-ml-py then meets exactly what it meets on such a driver (its function lookup fails).
"""

import argparse
import json

import pynvml

from inventory.telemetry.collector import NvmlCollector


class _OlderLibrary:
    """The loaded library without some symbols."""

    def __init__(self, library, hidden: set[str]) -> None:
        self._library, self._hidden = library, hidden

    def __getattr__(self, name):
        if name in self._hidden:
            raise AttributeError(name)
        return getattr(self._library, name)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=2)
    parser.add_argument("--hide", nargs="*", default=[])
    args = parser.parse_args()
    pynvml.nvmlInit()
    pynvml.nvmlLib = _OlderLibrary(pynvml.nvmlLib, set(args.hide))
    pynvml._nvmlGetFunctionPointer_cache.clear()
    collector = NvmlCollector(pynvml, "mock-host", watch_xid=False)
    for _ in range(args.polls):
        poll = collector.poll()
        print(json.dumps({
            "cards": [
                {"index": c.index, "uuid": c.uuid, "used_bytes": c.used_bytes,
                 "pids": [p.pid for p in c.processes], "unsupported": list(c.unsupported)}
                for c in poll.cards
            ],
            "faults": [[f.card_index, f.call, f.error, f.message] for f in poll.faults],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
