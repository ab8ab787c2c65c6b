"""The default runbook library is installed, parsed strictly and says what is true."""

import re

import pytest

from console.alerts.default_rules import DEFAULT_RULES
from inventory.telemetry.xid_events import XID_CATALOGUE, xid_class
from runbooks.library import LibraryFormatError, load_library, parse_note
from runbooks.models import RunbookNote

EXPECTED = {
    "mps-not-hard-isolation": "MPS is not hard isolation",
    "mps-server-crash": "MPS server crash",
    "choosing-isolation": "Choosing isolation",
    "oom-triage": "OOM triage",
    "kv-reservation": "KV reservation",
    "defragment-off-peak-reload": "Defragmenting by off-peak reload",
    "before-adding-a-model": "Before adding a model",
    "engine-memory-settings": "Engine memory settings",
    "mig-persistence": "MIG partitions that survive a reboot",
    "mps-setup": "MPS setup",
    "driver-library-mismatch": "NVML driver/library version mismatch",
    "xid-triage": "Xid triage",
}


@pytest.mark.django_db
def test_the_library_is_installed_with_a_first_revision():
    english = RunbookNote.objects.filter(from_library=True).exclude(slug__endswith="-zh")
    notes = {note.slug: note for note in english}
    assert set(notes) == set(EXPECTED)
    for slug, title_start in EXPECTED.items():
        assert notes[slug].title.startswith(title_start)
        assert notes[slug].revisions.get().version == 1


def _body(slug):
    return next(note for note in load_library() if note.slug == slug).body


def _words(text):
    return len(re.findall(r"\w+", text))


def test_each_note_is_substantive():
    for note in load_library():
        assert _words(note.body) >= 250, note.slug


def test_the_domain_facts_the_notes_must_state():
    mps = _body("mps-not-hard-isolation").lower()
    assert "every client on that gpu" in mps
    assert "not fault isolation" in mps
    assert "cuda_mps_active_thread_percentage" in mps
    assert "set_default_active_thread_percentage" in mps
    choosing = _body("choosing-isolation")
    assert re.search(r"MPS\W+(can|does)\W+run inside a MIG", choosing, re.IGNORECASE)
    for profile in ("1g.18gb", "2g.35gb", "3g.71gb", "7g.141gb"):
        assert profile in choosing
    kv = _body("kv-reservation").lower()
    assert "2 × layers" in kv or "2 x layers" in kv
    assert "mean" in kv and "p95" in kv
    oom = _body("oom-triage").lower()
    for cause in ("true peak", "allocator", "fragmentation"):
        assert cause in oom


def test_cross_links_point_at_existing_notes():
    slugs = {note.slug for note in load_library()}
    for note in load_library():
        for target in re.findall(r"\]\(([a-z0-9-]+)\)", note.body):
            assert target in slugs, (note.slug, target)


def test_the_mps_notes_carry_the_mps_tag():
    tags = {note.slug: note.tags for note in load_library()}
    assert "mps" in tags["mps-not-hard-isolation"]
    assert "mps" in tags["mps-server-crash"]


def test_a_note_without_front_matter_is_refused(tmp_path):
    path = tmp_path / "broken.md"
    path.write_text("# Just a heading\n")
    with pytest.raises(LibraryFormatError, match="front-matter"):
        parse_note(path)
    path.write_text("---\nslug: x\ntitle: X\n---\nbody\n")
    with pytest.raises(LibraryFormatError, match="tags"):
        parse_note(path)


def test_the_corrected_facts_are_stated():
    # nvidia-cuda-mps-control(1): one server at a time; another user's client waits.
    mps = _body("mps-not-hard-isolation")
    assert "one** `nvidia-cuda-mps-server` at a time" in mps
    assert "per Linux\nuser" not in mps and "multi-user mode" in mps
    choosing = _body("choosing-isolation")
    # MIG user guide: since R570 a process can enumerate several MIG devices; still no P2P.
    assert (
        "Since driver R570 a CUDA process can\n  enumerate more than one MIG instance" in choosing
    )
    assert "needs only the destroyed instances idle" in choosing
    assert "A CUDA process enumerates a single MIG instance" not in choosing
    # Linux containers show host PIDs with memory; only WDDM hides per-process memory.
    oom = _body("oom-triage")
    assert "only\nunder Windows WDDM is per-process memory hidden" in oom
    # pytorch/pytorch#183387: 2.9.1 ignores expandable_segments under PYTORCH_ALLOC_CONF.
    assert "issue 183387" in _body("defragment-off-peak-reload")
    kv = _body("kv-reservation")
    assert "whole on every tensor-parallel card" in kv and "TP=16" in kv


def test_the_new_operations_notes_cover_their_ground():
    assert "EXCLUSIVE_PROCESS" in _body("mps-setup")
    assert "nvidia-mig-parted apply" in _body("mig-persistence")
    assert "NVMLError_LibRmVersionMismatch" in _body("driver-library-mismatch")
    engines = _body("engine-memory-settings")
    for setting in ("--gpu-memory-utilization", "--mem-fraction-static", "--cuda-memory-fraction",
                    "OLLAMA_GPU_OVERHEAD", "--kv-cache-memory-bytes"):  # fmt: skip
        assert setting in engines


def test_the_xid_table_is_the_catalogue_with_the_alert_each_code_raises():
    severity_of_class = {cls: rule[3] for rule in DEFAULT_RULES
                         for cls in rule[7].get("xid_classes", ())}  # fmt: skip
    for language in ("en", "zh-hans"):
        (note,) = [n for n in load_library(language=language) if n.slug.startswith("xid-triage")]
        rows = re.findall(r"^\| ([\d, ]+) \|.*\| `(\w+)` \|$", note.body, re.MULTILINE)
        alerts = {int(code): alert for codes, alert in rows for code in codes.split(",")}
        assert set(alerts) == set(XID_CATALOGUE), language
        assert alerts == {code: severity_of_class[xid_class(code)] for code in alerts}, language
