"""The fake NVML as a module an agent *process* can be given (AGENT_NVML_MODULE), its cards'
process lists read from the JSON file FAKE_NVML_STATE whenever the file changes, so that an
end-to-end test can start, kill and replace processes under a running agent:

    {"host": "gpu-e2e-01", "cards": 1, "processes": [[card, pid, name, used_bytes, kind]]}

Everything else is `inventory.telemetry.fake_nvml`: same functions, errors and structs.
"""

import json
import os

from inventory.telemetry.fake_nvml import FakeHostState, FakeNvml, FakeProcess
from inventory.telemetry.simulator.catalogue import build_card, gpu_type

_PATH = os.environ.get("FAKE_NVML_STATE", "")
_nvml: FakeNvml | None = None
_mtime: float | None = None


def _load() -> FakeNvml:
    global _nvml, _mtime
    mtime = os.stat(_PATH).st_mtime
    if _nvml is not None and mtime == _mtime:
        return _nvml
    with open(_PATH) as state_file:
        state = json.load(state_file)
    if _nvml is None:
        gpu = gpu_type("H100-SXM5-80GB")
        cards = [build_card(gpu, state["host"], index) for index in range(state["cards"])]
        _nvml = FakeNvml(FakeHostState(cards))
    for card in _nvml.state.cards:
        card.processes = []
    for index, pid, name, used, kind in state["processes"]:
        _nvml.state.cards[index].processes.append(FakeProcess(pid, name, used, kind=kind))
    _mtime = mtime
    return _nvml


def __getattr__(name: str):
    return getattr(_load(), name)
