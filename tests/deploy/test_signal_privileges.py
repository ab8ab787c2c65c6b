"""The kernel log's Xids as the shipped unit grants them: the installed agent's kernel-log source
run as the unit's user with exactly the unit's capabilities and groups (setpriv), on this
machine's kernel, its real /dev/kmsg and kernel.dmesg_restrict=1. With the grant an NVRM line
written to the kernel log arrives as an Xid; without it, the source says by name what to grant.

The NVML signals (memory, processes, the event set's Xids, a lost card) are proven as the
unit's user by the mock NVML rehearsal (test_mock_nvml_rehearsal_e2e.py); docs/deploy.md's
table "Signals and privileges" lists every signal with its grant and its test.
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.deploy.as_the_unit import unit_command, unit_grants

READER = """
import json, sys, time
from inventory.agent.kernel_log import KernelXidSource, open_journal, open_kmsg
source = KernelXidSource([open_kmsg, open_journal], lambda pci: None)
deadline = time.time() + float(sys.argv[1])
first = True
while time.time() < deadline:
    events, faults = source.read(time.time())
    for fault in faults:
        print(json.dumps({"fault": [fault.call, fault.error, fault.message]}), flush=True)
    for event in events:
        print(json.dumps({"xid": event.detail}), flush=True)
    if first:
        print(json.dumps({"ready": source.via}), flush=True)
        first = False
    time.sleep(0.1)
"""

NVRM = "NVRM: Xid (PCI:0000:0f:00): 48, pid=4242, name=python3, DBE (double bit error) ECC"


def _restricted_kernel_log() -> bool:
    try:
        return Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    except OSError:
        return False


needs_root_and_restriction = pytest.mark.skipif(
    os.geteuid() != 0 or not _restricted_kernel_log(),
    reason="needs root (to drop to the unit's user and write to /dev/kmsg) and "
    "kernel.dmesg_restrict=1 (else anyone reads the kernel log)",
)


def _read_as_the_unit(agent_venv, capabilities, seconds: float, write: str | None):
    work = Path(tempfile.mkdtemp(prefix="kernel-log-"))
    work.chmod(0o755)
    _, groups = unit_grants()
    command, env, who = unit_command(agent_venv, work, capabilities, groups)
    reader = subprocess.Popen(
        [*command, "-c", READER, str(seconds)],
        cwd=work,
        env={"PATH": os.environ["PATH"], "LANG": "C.UTF-8", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in reader.stdout:
        lines.append(json.loads(line))
        if "ready" in lines[-1] and write is not None:
            with open("/dev/kmsg", "w") as kmsg:  # as root: into this kernel's log
                kmsg.write(f"<4>{write}\n")
            write = None
    assert reader.wait(timeout=30) == 0, reader.stderr.read()
    return lines, who


@needs_root_and_restriction
def test_the_units_grants_read_the_kernel_logs_xids(agent_venv):
    capabilities, _ = unit_grants()
    assert capabilities == ("syslog",)  # the unit's one capability, for this signal alone
    lines, who = _read_as_the_unit(agent_venv, capabilities, 4.0, NVRM)
    assert "uid 65534" in who and "CAP_SYSLOG" in who
    assert {"ready": "open_kmsg"} in lines, lines
    (xid,) = [line["xid"] for line in lines if "xid" in line]
    assert xid["xid"] == 48 and xid["pci_bus_id"] == "0000:0f:00" and xid["pid"] == 4242
    assert not [line for line in lines if "fault" in line]


@needs_root_and_restriction
def test_without_the_grant_the_kernel_log_is_named_unreadable_with_what_to_grant(agent_venv):
    lines, who = _read_as_the_unit(agent_venv, (), 1.0, None)
    assert "no capabilities" in who
    (fault,) = [line["fault"] for line in lines if "fault" in line]
    call, error, message = fault
    assert (call, error) == ("kernel_log", "Unreadable")
    assert "grant CAP_SYSLOG" in message and "systemd-journal" in message
    assert "Operation not permitted" in message  # /dev/kmsg under dmesg_restrict
