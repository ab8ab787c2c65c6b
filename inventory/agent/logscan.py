"""OOMs, CUDA faults, Xids and engine deaths in the logs of inference engines and the kernel.

    python -m inventory.agent.logscan FILE [--engine vllm]

prints one JSON object per event: `line` (1-based, where the event starts: a multi-line
traceback is one event, reported at its `Traceback` line), `kind`, `engine`, the Xid code for
`xid` events and the figures the message gave (`requested_bytes`, `allocated_bytes`,
`reserved_bytes`, `free_bytes`, `capacity_bytes`, ...).

Kinds (the families of `_RULES`, the one table of rules, and the kernel's Xid lines):
  oom          the GPU's memory ran out (PyTorch, CUDA, cuBLAS, NCCL, TensorRT-LLM, llama.cpp),
               or an engine refused to start because its memory does not fit (vLLM cache
               blocks, SGLang --mem-fraction-static, TGI prefill or total tokens, the
               TensorRT-LLM executor); `phase` says when
  fault        another CUDA failure: illegal memory access, device-side assert, launch
               failure, NCCL; not an OOM
  xid          an `NVRM: Xid` kernel line (or a card that fell off the bus: Xid 79)
  driver_fault the NVIDIA driver lost a card without an Xid: `RmInitAdapter failed!` (it could
               not initialise it) or a GSP heartbeat timeout; `pci_bus_id` where the line names
               the card
  engine_died  the engine's core, scheduler, shard or runner died
  kv_pressure  the engine ran out of KV cache space and retracted or preempted requests: it
               coped, so this is pressure, not an OOM
  restart      the engine started again after it had started or died earlier in the log

The patterns hold on to the stable parts of each phrasing (the exception names and the fixed
words of the messages), not to whole lines: log prefixes (timestamps, levels, process tags,
docker-compose and journald columns, ANSI colours) vary from one deployment to the next. A line
that matches none of them is never an event, and advice that merely mentions running out of
memory ("If out-of-memory error occurs during cudagraph capture, ...") is not an OOM, nor is a
request the engine echoes ("Received request ...: prompt: '...out of memory...'").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

ENGINES = ("vllm", "sglang", "tgi", "ollama", "llamacpp", "trtllm", "pytorch", "kernel")

# ---- prefixes: what deployments put in front of the engine's own message ----------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\^\[\[[0-9;]*m")
_PREFIXES = [
    re.compile(r"^\s*[│|]\s?(?=\S)"),  # kubectl / buildkite table columns
    re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s?"),  # CI timestamps
    re.compile(r"^\[\s*\d+\.\d+\]\s?"),  # dmesg
    re.compile(r"^[A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s:\[]+(?:\[\d+\])?: ?"),  # journald
    re.compile(r"^\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\s+"),  # ISO timestamps
    re.compile(r"^[\w.-]+-\d+\s+\| ?"),  # docker compose "service-1  | "
    re.compile(r"^(?P<stream>\([^()]*\bpid=\d+[^()]*\))\s?"),  # vLLM "(EngineCore_DP0 pid=7)"
    re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s[^\[\]]{0,40}?\[[\w./-]+:\d+\] ?"),
    re.compile(r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) \d\d-\d\d [\d:]+ [\w./-]+:\d+\] ?"),
    re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<stream>(?: [A-Z]+\d+)*)\] ?"),  # SGLang
]


def split_prefix(raw: str) -> tuple[str, str]:
    """(stream, message): the process tag a line came from, and the engine's own text.

    The stream keeps interleaved tracebacks of tensor-parallel workers apart.
    """
    text = _ANSI.sub("", raw).rstrip("\r\n").replace("^M", "").replace("\x00", "")
    text = re.sub(r"\s*│\s*$", "", text)
    stream = ""
    for _ in range(8):
        for pattern in _PREFIXES:
            match = pattern.match(text)
            if match and match.end() > 0:
                tag = match.groupdict().get("stream")
                if tag:
                    stream += tag.strip()
                text = text[match.end() :]
                break
        else:
            break
    return stream, text


# ---- sizes --------------------------------------------------------------------------------

_UNITS = {
    "bytes": 1,
    "byte": 1,
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    # Engines print GB for what they computed in GiB (vLLM, SGLang divide by 2**30).
    "kb": 2**10,
    "mb": 2**20,
    "gb": 2**30,
    "tb": 2**40,
}
_SIZE = r"(\d+(?:[.,]\d+)?)\s*(bytes?|[KMGT]i?B|B)\b"


def to_bytes(number: str, unit: str) -> int:
    return int(float(number.replace(",", ".")) * _UNITS[unit.lower()])


def _size(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("SIZE", _SIZE), re.IGNORECASE)


# ---- figures: (key, pattern) with one size group pair, or a plain number -------------------

_SIZE_FIGURES = [
    ("requested_bytes", _size(r"Tried to allocate SIZE")),
    ("capacity_bytes", _size(r"SIZE total capacity")),
    ("capacity_bytes", _size(r"total capacity? of SIZE")),
    ("capacity_bytes", _size(r"total capacty of SIZE")),
    ("free_bytes", _size(r"of which SIZE is free")),
    ("free_bytes", _size(r"already allocated; SIZE free")),
    ("allocated_bytes", _size(r"SIZE already allocated")),
    ("allocated_bytes", _size(r"SIZE is allocated by PyTorch")),
    ("reserved_unallocated_bytes", _size(r"SIZE is reserved by PyTorch but unallocated")),
    ("reserved_bytes", _size(r"SIZE reserved in total by PyTorch")),
    ("process_used_bytes", _size(r"this process has SIZE memory in use")),
    ("process_used_bytes", _size(r"Process \d+ has SIZE memory in use")),
    ("allowed_bytes", _size(r"SIZE allowed;")),
    # TGI / PyTorch memory-fraction message
    ("allocated_bytes", _size(r"Currently allocated\s*:\s*SIZE")),
    ("requested_bytes", _size(r"Requested\s*:\s*SIZE")),
    ("capacity_bytes", _size(r"Device limit\s*:\s*SIZE")),
    ("free_bytes", _size(r"Free \(according to CUDA\)\s*:\s*SIZE")),
    # llama.cpp / ggml
    ("requested_bytes", _size(r"allocating SIZE on device")),
    ("requested_bytes", _size(r"failed to allocate SIZE")),
    # NCCL
    ("requested_bytes", _size(r"Failed to CUDA calloc SIZE")),
]
# TensorRT-LLM's executor names the unit before the figure: "Total GPU memory (GiB): 140.06"
_GIB_FIGURES = [
    ("capacity_bytes", re.compile(r"Total GPU memory \(GiB\): (\d+(?:\.\d+)?)")),
    (
        "free_bytes",
        re.compile(r"Free GPU memory before component creation attempt \(GiB\): (\d+(?:\.\d+)?)"),
    ),
]
_EXACT_FIGURES = [
    ("requested_bytes", re.compile(r"failed to allocate \w+ buffer of size (\d+)")),
]
_NUMBER_FIGURES = [
    ("gpu_index", re.compile(r"\bGPU (\d+)(?: has a total|;)")),
    ("gpu_index", re.compile(r"on device (\d+)")),
    ("gpu_index", re.compile(r"Allocation on device (\d+)")),
    ("gpu_index", re.compile(r"device cuda:(\d+)")),
    ("gpu_index", re.compile(r"\bCUDA(\d+) buffer")),
    ("pid", re.compile(r"\bpid=(\d+)")),
    ("max_model_len", re.compile(r"max seq len \((\d+)\)")),
    ("kv_cache_tokens", re.compile(r"stored in KV cache \((\d+)\)")),
    ("prefill_tokens", re.compile(r"\b(\d+) prefill tokens")),
    ("prefill_tokens", re.compile(r"Not enough memory to handle (\d+) tokens")),
    ("total_tokens", re.compile(r"Not enough memory to handle (\d+) total tokens")),
    ("requested_tokens", re.compile(r"Try to allocate (\d+) tokens")),
    ("available_tokens", re.compile(r"Ava(?:il|li)able tokens: (\d+)")),
]
_VLLM_FREE = re.compile(
    r"Free memory on device(?: cuda:(\d+))? \(([\d.]+)/([\d.]+) GiB\) on startup is less than "
    r"desired GPU memory utilization \(([\d.]+), ([\d.]+) GiB\)"
)
_VLLM_KV_NEEDED = _size(
    r"SIZE KV cache is needed, which is larger than the available KV cache memory \(SIZE\)"
)


def read_figures(text: str) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    for key, pattern in _SIZE_FIGURES:
        if key not in figures and (match := pattern.search(text)):
            figures[key] = to_bytes(match.group(1), match.group(2))
    for key, pattern in _EXACT_FIGURES:
        if match := pattern.search(text):
            figures[key] = int(match.group(1))
    for key, pattern in _NUMBER_FIGURES:
        if key not in figures and (match := pattern.search(text)):
            figures[key] = int(match.group(1))
    for key, pattern in _GIB_FIGURES:
        if key not in figures and (match := pattern.search(text)):
            figures[key] = int(float(match.group(1)) * 2**30)
    if match := _VLLM_FREE.search(text):
        if match.group(1) is not None:
            figures["gpu_index"] = int(match.group(1))
        figures["free_bytes"] = int(float(match.group(2)) * 2**30)
        figures["capacity_bytes"] = int(float(match.group(3)) * 2**30)
        figures["gpu_memory_utilization"] = float(match.group(4))
        figures["requested_bytes"] = int(float(match.group(5)) * 2**30)
    if match := _VLLM_KV_NEEDED.search(text):
        figures["requested_bytes"] = to_bytes(match.group(1), match.group(2))
        figures["free_bytes"] = to_bytes(match.group(3), match.group(4))
    # PyTorch >= 2.1 prints the reserve as "reserved but unallocated": reserved = both.
    if "reserved_bytes" not in figures and "reserved_unallocated_bytes" in figures:
        figures["reserved_bytes"] = figures.get("allocated_bytes", 0) + figures.pop(
            "reserved_unallocated_bytes"
        )
    figures.pop("reserved_unallocated_bytes", None)
    return figures


# ---- what each line may be ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    reason: str
    pattern: re.Pattern[str]
    phase: str | None = None  # the phase the phrasing itself implies
    follow_on: bool = False  # a consequence of an event just before: joins it, or stands alone


def _rule(kind, reason, pattern, phase=None, follow_on=False) -> _Rule:
    return _Rule(kind, reason, re.compile(pattern), phase, follow_on)


_RULES = [
    # -- KV cache pressure the engine handled (requests retracted or preempted): not an OOM
    _rule("kv_pressure", "retracted", r"Decode out of memory happened"),
    _rule("kv_pressure", "retracted", r"KV cache pool is full\. Retract requests"),
    _rule(
        "kv_pressure",
        "preempted",
        r"preempted by PreemptionMode\.\w+ mode because there is "
        r"not enough KV cache space",
    ),
    # -- out of memory, at run time
    _rule("oom", "torch_oom", r"\bOutOfMemoryError\b"),
    _rule("oom", "cuda_oom", r"\bCUDA out of memory\. Tried to allocate"),
    _rule("oom", "cuda_oom", r"\bCUDA out of memory occurred\b"),
    _rule("oom", "cuda_oom", r"\w(?:Error|Exception): .*\bCUDA out of memory\b"),
    _rule("oom", "kv_pool_exhausted", r"(?:Prefill|Decode) out of memory\. Try to lower"),
    _rule("oom", "cuda_oom", r"\bCUDA (?:driver )?error: out of memory"),
    _rule("oom", "cuda_oom", r"\bCUDA error \d+ at \S+: out of memory"),
    _rule("oom", "cuda_oom", r"\b(?:cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY)\b"),
    _rule("oom", "cuda_malloc_failed", r"\bcudaMalloc(?:Async)? failed: out of memory"),
    _rule("oom", "cublas_alloc_failed", r"\bCUBLAS_STATUS_ALLOC_FAILED\b"),
    _rule("oom", "cudnn_alloc_failed", r"\bCUDNN_STATUS_ALLOC_FAILED\b"),
    _rule("oom", "allocation_exceeds_limit", r"Allocation on device \d+ would exceed allowed"),
    _rule("oom", "ggml_alloc_failed", r"failed to allocate CUDA\d* buffer", follow_on=True),
    _rule("oom", "ggml_alloc_failed", r"unable to allocate CUDA\d* buffer", follow_on=True),
    # NCCL's own allocations; newer NCCL prints the CUDA error number before its name
    _rule("oom", "nccl_oom", r"\bCuda failure (?:\d+ )?'out of memory'"),
    _rule("oom", "nccl_oom", r"\bFailed to CUDA calloc \d+ bytes", follow_on=True),
    # TensorRT-LLM's C++ runtime; a pasted or wrapped line can carry the call's tail alone
    _rule("oom", "cuda_malloc_failed", r"\bCUDA runtime error in .*: out of memory"),
    _rule("oom", "cuda_malloc_failed", r"^\S*\): out of memory \(/\S*tensorrt_llm/"),
    # -- out of memory at start: the engine's memory does not fit
    _rule("oom", "kv_cache_no_room", r"No available memory for the cache blocks", "load"),
    _rule("oom", "free_memory_below_target", r"Free memory on device.*less than desired", "load"),
    _rule(
        "oom",
        "kv_cache_too_small",
        r"larger than the maximum number of tokens that can be "
        r"stored in KV cache",
        "load",
    ),
    _rule(
        "oom",
        "kv_cache_too_small",
        r"KV cache is needed, which is larger than the "
        r"available KV cache memory",
        "load",
    ),
    _rule(
        "oom",
        "mem_fraction_static",
        r"Not enough memory\. Please try to increase "
        r"--mem-fraction-static",
        "load",
    ),
    _rule("oom", "mem_fraction_static", r"Not enough memory to allocate KV cache", "load"),
    _rule(
        "oom",
        "prefill_tokens",
        r"Not enough memory to handle \d+ (?:prefill |total )?tokens",
        "warmup",
    ),
    _rule(
        "oom",
        "executor_no_room",
        r"Executor creation failed due to insufficient GPU memory",
        "load",
    ),
    # -- other CUDA faults: not OOMs
    _rule("fault", "illegal_memory_access", r"an illegal memory access was encountered"),
    _rule("fault", "device_side_assert", r"device-side assert(?:ion)? triggered"),
    _rule(
        "fault",
        "device_side_assert",
        r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] "
        r"Assertion .* failed",
    ),
    _rule("fault", "launch_failure", r"unspecified launch failure"),
    _rule("fault", "illegal_instruction", r"an illegal instruction was encountered"),
    _rule("fault", "misaligned_address", r"CUDA error: misaligned address"),
    _rule("fault", "ecc_error", r"uncorrectable ECC error encountered"),
    _rule("fault", "cublas_error", r"\bCUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR)\b"),
    _rule("fault", "nccl_error", r"\bNCCL error\b"),
    _rule("fault", "nccl_timeout", r"Watchdog caught collective operation timeout"),
    _rule("fault", "ggml_assert", r"\bGGML_ASSERT\("),
    _rule("fault", "cuda_error", r"\bCUDA error: (?!out of memory)\w"),
    # -- the engine died
    _rule("engine_died", "engine_core_died", r"Engine core proc \S+ died unexpectedly"),
    _rule("engine_died", "engine_core_died", r"Worker proc \S+ died unexpectedly"),
    _rule("engine_died", "engine_core_fatal", r"EngineCore encountered a fatal error"),
    _rule("engine_died", "engine_core_failed_to_start", r"EngineCore failed to start"),
    _rule("engine_died", "engine_core_failed_to_start", r"Engine core initialization failed"),
    _rule("engine_died", "engine_dead", r"\b(?:Async)?EngineDeadError\b"),
    _rule("engine_died", "engine_loop_died", r"Engine loop has died"),
    _rule("engine_died", "scheduler_exception", r"Scheduler hit an exception"),
    _rule("engine_died", "child_failed", r"Received sigquit from a child process"),
    _rule("engine_died", "shard_failed", r"Shard \d+ (?:failed to start|crashed)"),
    _rule("engine_died", "shard_failed", r"Shard process was signaled to shutdown"),
    _rule("engine_died", "shard_failed", r"\bError: (?:ShardCannotStart|ShardFailed)\b"),
    _rule("engine_died", "webserver_crashed", r"Webserver Crashed|Error: WebserverFailed"),
    _rule("engine_died", "runner_terminated", r"llama runner (?:process has )?terminated"),
    # -- the NVIDIA driver lost the card without an Xid line: it could not initialise it, or
    # its GSP firmware stopped answering. No "NVRM:" in the patterns: journald's short form
    # ("kernel: NVRM: ...") loses it to the prefix.
    _rule("driver_fault", "rm_init_failed", r"\bRmInitAdapter failed!"),
    _rule("driver_fault", "gsp_heartbeat_timeout", r"_kgspRpcRecvPoll: GSP RM heartbeat timed out"),
]
# What the engine repeats of a request (vLLM logs each prompt it receives): the user's words,
# never the engine's, however much they talk of running out of memory.
_ECHOED_REQUEST = re.compile(r"\bReceived request \S+: prompt: ")
_PCI_ADDRESS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.\d)?"
_XID = re.compile(
    rf"NVRM: Xid \((?:PCI:)?(?P<pci>{_PCI_ADDRESS})\): "
    r"(?P<xid>\d+)(?:, pid=(?P<pid>'?<?\w+>?'?))?(?:, name=(?P<name>[^,]*))?(?:, (?P<text>.*))?"
)
_GPU_AT = re.compile(r"NVRM: GPU at PCI:(?P<pci>[0-9a-fA-F:.]+): (?P<uuid>GPU-[0-9a-fA-F-]+)")
_GPU_NAMED = re.compile(r"NVRM: The NVIDIA GPU (?P<pci>[0-9a-fA-F:.]+)")
_FALLEN = re.compile(r"fallen off the bus")
_DRIVER_GPU = re.compile(rf"\bGPU (?P<pci>{_PCI_ADDRESS}):")
_STARTS = re.compile(
    r"Starting vLLM API server|vLLM API server version \S+|The server is fired up and ready "
    r"to roll|text_generation_launcher: Starting shard (?:0\b|rank=0\b)|Listening on \S+ \(version "
    r"|server is listening on (?:http://)?\S+"
)
# Lines that belong to the event before them: the help text CUDA and PyTorch print after an
# error, the C++ frames of a c10::Error, TGI's figures, the shard rank, the CUDA error NCCL
# names after its own (an OOM there makes the NCCL error an OOM), TensorRT-LLM's memory table.
_CONTINUATION = re.compile(
    r"^\s*(?:CUDA kernel errors might be|For debugging consider passing|Compile with "
    r"`TORCH_USE_CUDA_DSA`|Exception raised from|frame #\d+|Currently allocated|Requested\s*:"
    r"|Device limit|Free \(according to CUDA\)|PyTorch limit|: \d+(?:\.\d+)? GiB|rank=\d+"
    r"|If reserved|See documentation|Search for `cudaError|Device-side assertions? "
    r"|current device: \d+|Try to allocate \d+ tokens|Ava(?:il|li)able tokens:"
    r"|self\.token_to_kv_pool|self\.tree_cache"
    r"|ncclUnhandledCudaError|Last error:|Cuda failure "
    r"|The following component could not be created|Total GPU memory \(GiB\)"
    r"|Free GPU memory before component|Previously created components"
    r"|[A-Z][\w ()-]*: \d+(?:\.\d+)? / \d+(?:\.\d+)?\s*$)"
)
# A traceback's source lines quote the messages they raise: `raise ValueError("No available
# memory for the cache blocks. "` is code, not the error.
_SOURCE_LINE = re.compile(r'^\s*(?:raise\b|File "|"|f")|^\s{4,}[\w.]+(?: = |\()')
_TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
_CHAINED = re.compile(
    r"^(?:During handling of the above exception, another exception occurred:|The above "
    r"exception was the direct cause of the following exception:)"
)
_PHASES = [
    (
        "cuda_graph_capture",
        re.compile(
            r"capture_model|cuda_graph|cudagraph|capture_end|"
            r"graph_capture|Capturing (?:CUDA graph|cudagraph)",
            re.I,
        ),
    ),
    (
        "profile",
        re.compile(
            r"profile_run|determine_available_memory|determine_num_available"
            r"_blocks|_dummy_run|profile_max_num_token|memory profiling",
            re.I,
        ),
    ),
    ("warmup", re.compile(r"\bwarm_?up\b|warming up|Method Warmup", re.I)),
    (
        "load",
        re.compile(
            r"load_model|load_weights|llama_model_load|load_tensors|"
            r"initialize_cache|init_device|Error when initializing model|"
            r"load_single_module|creating modelInstanceState|loading failed with error",
            re.I,
        ),
    ),
]
# What an engine logs as it goes from one phase to the next: the phase of an OOM whose own
# lines do not say (a bare OOM line after "Capturing cudagraphs ...").
_PHASE_MARKERS = [
    ("cuda_graph_capture", re.compile(r"Capturing (?:CUDA graph|cudagraph|the model for CUDA)")),
    ("profile", re.compile(r"Memory profiling|profiling the memory", re.I)),
    ("warmup", re.compile(r"Warming up model|Running warmup", re.I)),
    ("load", re.compile(r"Loading (?:model )?weights|Load weight begin|load_tensors: loading")),
    (
        "serve",
        re.compile(
            r"Graph capturing finished|Application startup complete|ready to roll|"
            r"Started server process|server is listening|Setting max batch total"
        ),
    ),
]
_ENGINE_HINTS = [
    ("vllm", re.compile(r"vllm|EngineCore|VllmWorker|gpu_memory_utilization", re.I)),
    (
        "sglang",
        re.compile(
            r"sglang|mem-fraction-static|Scheduler hit an exception|sigquit|#retracted_reqs"
            r"|(?:Decode|Prefill) out of memory"
            r"|^\[\d{4}-\d\d-\d\d [\d:]+(?: (?:TP|DP|PP|EP)\d+)+\]",
            re.I,
        ),
    ),
    (
        "tgi",
        re.compile(
            r"text[_-]generation|ShardCannotStart|shard-manager|Webserver"
            r"|max-batch-(?:prefill|total)-tokens|Warmup\(Generation",
            re.I,
        ),
    ),
    ("ollama", re.compile(r"ollama|llama runner|source=\w+\.go:\d+", re.I)),
    ("llamacpp", re.compile(r"\bggml[-_]|\bllama_|\bllm_load|cudaMalloc failed|load_tensors:")),
    ("trtllm", re.compile(r"TensorRT-LLM|\[TRT-LLM\]|tensorrt_llm|trtllm", re.I)),
    (
        "pytorch",
        re.compile(
            r"\btorch\b|PyTorch|CUBLAS_|c10::|CUDA out of memory\. Tried to "
            r"allocate|max_split_size_mb|RuntimeError: CUDA error",
            re.I,
        ),
    ),
]
_PRIORITY = {"oom": 3, "fault": 2, "driver_fault": 2, "engine_died": 1, "kv_pressure": 0}
MERGE_WINDOW_LINES = 40  # the same incident told again by another process, or once per thread
DEATH_WINDOW_LINES = 3  # one engine death, told in its own words by each of its processes
_HISTORY_LINES = 30  # the lines before a one-line event: its phase, its engine
_MAX_CONTEXT_LINES = 400


@dataclass(slots=True)
class LogEvent:
    line: int
    kind: str
    engine: str
    detail: dict[str, Any] = field(default_factory=dict)
    end_line: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"line": self.line, "kind": self.kind, "engine": self.engine, **self.detail}


@dataclass(slots=True)
class _Open:
    """An event being read: a traceback, or a line and its continuation lines."""

    start: int
    stream: str
    state: str  # "frames", "tail", "await" (after a chained-exception marker), "line"
    rule: _Rule | None = None
    message: str = ""
    texts: list[str] = field(default_factory=list)  # messages and tails, for figures
    context: list[str] = field(default_factory=list)  # every line, for the phase and engine
    last: int = 0


class LogScanner:
    """Reads a log line by line, in order; yields each event once it is complete."""

    def __init__(self, engine: str | None = None) -> None:
        self.engine = engine
        self._line = 0
        self._open: dict[str, _Open] = {}
        # the last line of the last event with that (kind, message), and of that kind
        self._recent: dict[tuple[str, str], int] = {}
        self._recent_kind: dict[str, int] = {}
        self._file_engine: str | None = None
        self._started = False
        self._fatal_seen = False
        self._uuid_by_pci: dict[str, str] = {}
        self._named_gpu: tuple[int, str] | None = None
        self._phase_marker: str | None = None
        self._last_stream = ""
        self._history: dict[str, deque[str]] = {}

    @property
    def lines_read(self) -> int:
        return self._line

    def feed(self, raw: str) -> list[LogEvent]:
        self._line += 1
        number = self._line
        stream, message = split_prefix(raw)
        if not stream and self._last_stream in self._open:
            # a multi-line record (SGLang's tracebacks) tags only its first line
            stream = self._last_stream
        self._last_stream = stream
        history = self._history.setdefault(stream, deque(maxlen=_HISTORY_LINES))
        history.append(raw)
        hint = _engine_hint(raw)
        if hint is not None and hint != "pytorch":
            self._file_engine = hint
        done: list[LogEvent] = []
        if kernel := self._kernel_line(number, message):
            return self._close_all(number) + kernel
        current = self._open.get(stream)
        if current is not None:
            if self._continues(current, number, raw, message):
                return done
            done += self._close(stream)
        if _TRACEBACK.search(message):
            opened = _Open(number, stream, "frames", context=[raw], last=number)
            head = message[: _TRACEBACK.search(message).start()]
            if rule := _match(head):
                opened.rule, opened.message = rule, head.strip()
            self._open[stream] = opened
            return done
        if rule := _match(message):
            if rule.follow_on and self._joins_recent(rule.kind, number):
                self._recent_kind[rule.kind] = number
                return done
            self._open[stream] = _Open(
                number, stream, "line", rule, message.strip(), [message], list(history), number
            )
            return done
        for phase, pattern in _PHASE_MARKERS:
            if pattern.search(message):
                self._phase_marker = phase
                break
        if _STARTS.search(message):
            if self._started or self._fatal_seen:
                done.append(self._emit_restart(number, raw))
            self._started = True
        return done

    def flush(self) -> list[LogEvent]:
        """Close what is still open (the end of the file, or a writer gone quiet)."""
        return self._close_all(self._line + 1)

    # ---- reading an open event --------------------------------------------------------

    def _continues(self, current: _Open, number: int, raw: str, message: str) -> bool:
        state = current.state
        if state == "frames":
            if (
                not message.strip()
                or message[:1] in (" ", "\t", "^", "~")
                or message.startswith("File ")
            ):
                current.context.append(raw)
                return True
            current.state = "tail"
            self._take(current, message, raw, exception=True)
            return True
        if state == "await":
            if _TRACEBACK.search(message):
                current.state = "frames"
                current.context.append(raw)
                return True
            return not message.strip()
        # "tail" or "line": continuation text, figures, a chained exception
        if _CHAINED.match(message.strip()):
            current.state = "await"
            current.context.append(raw)
            return True
        if not message.strip() or _CONTINUATION.match(message):
            self._take(current, message, raw, exception=False)
            return True
        rule = _match(message)
        if (
            rule is not None
            and rule.follow_on
            and rule.kind == (current.rule and current.rule.kind)
        ):
            self._take(current, message, raw, exception=False)
            return True
        return False

    def _take(self, current: _Open, message: str, raw: str, *, exception: bool) -> None:
        current.last = self._line
        if len(current.context) < _MAX_CONTEXT_LINES:
            current.context.append(raw)
        current.texts.append(message)
        rule = _match(message)
        if rule is None:
            return
        old = _PRIORITY.get(current.rule.kind, 0) if current.rule else -1
        if _PRIORITY.get(rule.kind, 0) > old or (exception and current.rule is None):
            current.rule = rule
            current.message = message.strip()
        elif exception and rule.kind == current.rule.kind:
            current.message = message.strip()

    def _close(self, stream: str) -> list[LogEvent]:
        current = self._open.pop(stream)
        rule = current.rule
        if rule is None:
            return []
        last = current.last or current.start
        signature = (rule.kind, _signature(current.message))
        previous = self._recent.get(signature)
        self._recent[signature] = last
        previous_kind = self._recent_kind.get(rule.kind)
        self._recent_kind[rule.kind] = last
        if previous is not None and current.start - previous <= MERGE_WINDOW_LINES:
            return []  # the same message told again: by another rank, thread or process
        if (
            rule.kind == "engine_died"
            and previous_kind is not None
            and current.start - previous_kind <= DEATH_WINDOW_LINES
        ):
            return []
        if rule.kind in ("oom", "fault", "engine_died"):
            self._fatal_seen = True
        text = "\n".join(current.texts)
        detail: dict[str, Any] = {"reason": rule.reason, "message": current.message[:500]}
        if rule.kind == "oom":
            detail["phase"] = (
                rule.phase or _phase("\n".join(current.context)) or self._phase_marker or "serve"
            )
            detail.update(read_figures(text))
        elif rule.kind == "fault":
            figures = read_figures(text)
            if "gpu_index" in figures:
                detail["gpu_index"] = figures["gpu_index"]
        elif rule.kind == "driver_fault" and (match := _DRIVER_GPU.search(text)):
            detail["pci_bus_id"] = _pci(match.group("pci"))
            if uuid := self._uuid_by_pci.get(detail["pci_bus_id"]):
                detail["card_uuid"] = uuid
        if current.state != "line" or current.start != last:
            detail["end_line"] = last
        if pid := re.search(r"\bpid=(\d+)", current.stream):
            detail.setdefault("pid", int(pid.group(1)))
        engine = self._engine_of(text, "\n".join(current.context))
        return [LogEvent(current.start, rule.kind, engine, detail, last)]

    def _close_all(self, number: int) -> list[LogEvent]:
        done: list[LogEvent] = []
        for stream in sorted(self._open, key=lambda s: self._open[s].start):
            done += self._close(stream)
        return done

    def _joins_recent(self, kind: str, number: int) -> bool:
        previous = self._recent_kind.get(kind)
        return previous is not None and number - previous <= 3

    # ---- kernel lines -------------------------------------------------------------------

    def _kernel_line(self, number: int, message: str) -> list[LogEvent]:
        if "NVRM:" not in message:
            return []
        if match := _GPU_AT.search(message):
            self._uuid_by_pci[_pci(match.group("pci"))] = match.group("uuid")
            return []
        if match := _XID.search(message):
            return [self._xid_event(number, match)]
        if match := _GPU_NAMED.search(message):
            self._named_gpu = (number, match.group("pci"))
            return []
        if _FALLEN.search(message):
            start, pci = number, None
            if self._named_gpu is not None and number - self._named_gpu[0] <= 3:
                start, pci = self._named_gpu
            detail: dict[str, Any] = {
                "xid": 79,
                "reason": "fallen_off_the_bus",
                "message": message.strip()[:500],
            }
            if start != number:
                detail["end_line"] = number
            if pci is not None:
                detail["pci_bus_id"] = _pci(pci)
                if uuid := self._uuid_by_pci.get(_pci(pci)):
                    detail["card_uuid"] = uuid
            return [LogEvent(start, "xid", self.engine or "kernel", detail, number)]
        return []

    def _xid_event(self, number: int, match: re.Match[str]) -> LogEvent:
        pci = _pci(match.group("pci"))
        detail: dict[str, Any] = {"xid": int(match.group("xid")), "pci_bus_id": pci}
        pid = (match.group("pid") or "").strip("'<>")
        if pid.isdecimal():
            detail["pid"] = int(pid)
        name = (match.group("name") or "").strip()
        if name and name != "<unknown>":
            detail["process_name"] = name
        if match.group("text"):
            detail["message"] = match.group("text").strip()[:500]
        if uuid := self._uuid_by_pci.get(pci):
            detail["card_uuid"] = uuid
        return LogEvent(number, "xid", self.engine or "kernel", detail, number)

    # ---- the rest -----------------------------------------------------------------------

    def _emit_restart(self, number: int, raw: str) -> LogEvent:
        return LogEvent(number, "restart", self._engine_of(raw, raw), {"reason": "engine_started"})

    def _engine_of(self, text: str, context: str) -> str:
        """The engine named by the event's own words, else by the lines around it, else by
        the log so far; PyTorch only when nothing names a serving engine."""
        if self.engine:
            return self.engine
        own, around = _engine_hint(text), _engine_hint(context)
        for hint in (own, around):
            if hint is not None and hint != "pytorch":
                return hint
        return self._file_engine or own or around or "unknown"


def _pci(value: str) -> str:
    """One spelling of a PCI address: the kernel writes 0000:08:00, NVML 00000000:08:00.0."""
    parts = value.lower().split(":")
    if len(parts) == 3:
        domain, bus, device = parts
        return f"{int(domain, 16):04x}:{bus}:{device.split('.')[0]}"
    return value.lower()


def _match(message: str) -> _Rule | None:
    if not message or _SOURCE_LINE.match(message) or _ECHOED_REQUEST.search(message):
        return None
    for rule in _RULES:
        if rule.pattern.search(message):
            return rule
    return None


_RETELLING_NUMBERS = re.compile(
    r"0x[0-9a-fA-F]+|\[[\d,]+\]"
    r"|(?P<tag>pid=|rank=?|Rank |GPU |TP|DP|device |cuda:|CUDA)\d+"
)


def _signature(message: str) -> str:
    """A message without what differs when each rank, thread or process tells it again (its
    GPU, rank, thread, PID); sizes stay, so two allocations that failed stay two events."""
    return _RETELLING_NUMBERS.sub(lambda m: (m.group("tag") or "") + "#", message)


def _phase(context: str) -> str | None:
    for phase, pattern in _PHASES:
        if pattern.search(context):
            return phase
    return None


def _engine_hint(text: str) -> str | None:
    for engine, pattern in _ENGINE_HINTS:
        if pattern.search(text):
            return engine
    return None


def scan_lines(lines: Iterable[str], engine: str | None = None) -> Iterator[LogEvent]:
    scanner = LogScanner(engine)
    for raw in lines:
        yield from scanner.feed(raw)
    yield from scanner.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inventory.agent.logscan", description=__doc__)
    parser.add_argument("file", help="a log file, or - for standard input")
    parser.add_argument("--engine", choices=ENGINES, help="the engine that wrote the log")
    args = parser.parse_args(argv)
    try:
        # errors="replace": logs hold stray bytes (progress bars, binary garbage)
        stream = (
            sys.stdin if args.file == "-" else open(args.file, encoding="utf-8", errors="replace")  # noqa: SIM115
        )
    except OSError as error:
        print(f"logscan: {error}", file=sys.stderr)
        return 2
    with stream:
        events = sorted(scan_lines(stream, args.engine), key=lambda event: event.line)
    for event in events:
        print(json.dumps(event.as_dict(), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
