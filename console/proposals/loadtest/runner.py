"""Drives every endpoint of a plan at once from one process (pure: no Django).

Open loop: each deployment gets Poisson arrivals at its own rate, and a request is sent when
its moment comes whether or not earlier ones have answered, so a slow model does not slow the
others (a closed loop would hide its queue). Each request streams, so the runner records the
time to first token, the mean inter-token latency and the end-to-end latency; a request that
fails is recorded with an error code, never raised. The caller passes two callables, run in a
thread so that they may touch a database: ``progress(snapshot)`` about once a second and
``cancelled()`` which stops the test when it answers True.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import h11
import orjson

from console.proposals.loadtest.http import ConnectFailed, Endpoint, ProtocolFailed
from console.proposals.loadtest.plan import Api, LoadTestPlan, Phase, Target
from inventory.analytics.stats import percentile

# A model whose endpoint stops answering would otherwise pile up requests without end.
MAX_IN_FLIGHT_PER_TARGET = 4000
PROGRESS_EVERY_S = 1.0
CANCEL_POLL_S = 0.5
LIVE_WINDOW_S = 10.0
COLD_START_WAIT_S = 600.0

ERROR_REFUSED = "refused"
ERROR_TIMEOUT = "timeout"
ERROR_HTTP = "http_status"
ERROR_GARBAGE = "garbage"
ERROR_PROTOCOL = "protocol"
ERROR_SHED = "client_shed"  # more in flight than MAX_IN_FLIGHT_PER_TARGET: not sent


@dataclass(slots=True)
class RequestRecord:
    deployment: str
    sent_s: float  # since the load started
    long: bool
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: float | None = None  # mean gap between tokens after the first
    tokens: int = 0
    error: str = ""
    detail: str = ""  # the HTTP status, or the first bytes of a garbage answer

    def as_row(self) -> list:
        return [
            self.deployment,
            round(self.sent_s, 4),
            self.long,
            self.ttft_s,
            self.e2e_s,
            self.itl_s,
            self.tokens,
            self.error,
            self.detail,
        ]


@dataclass
class RunOutcome:
    started_at: float  # epoch seconds: the load's first moment
    ended_at: float
    records: list[RequestRecord]
    cold_start: dict  # {"ran": bool, ...code/params or per-deployment restart seconds}
    cancelled: bool = False
    phase_starts: dict[str, float] = field(default_factory=dict)  # phase -> seconds in


def _prompt(tokens: int) -> str:
    # One short word per token is what a tokenizer makes of it, near enough.
    return "hi " * max(1, tokens)


class _Bodies:
    """The request bodies, serialized once per target and length."""

    def __init__(self, plan: LoadTestPlan) -> None:
        mix = plan.mix
        self._bodies: dict[tuple[str, bool], bytes] = {}
        for target in plan.targets:
            model = target.engine_model or target.name
            for long in (False, True):
                prompt = _prompt(mix.long_prompt_tokens if long else mix.short_prompt_tokens)
                output = mix.long_output_tokens if long else mix.short_output_tokens
                api = Api(target.api)
                if api is Api.COMPLETIONS:
                    body = {"model": model, "prompt": prompt, "max_tokens": output}
                    body |= {"stream": True, "ignore_eos": True}
                elif api is Api.CHAT:
                    body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
                    body |= {"max_tokens": output, "stream": True, "ignore_eos": True}
                else:
                    body = {"model": model, "prompt": prompt, "stream": True}
                    body["options"] = {"num_predict": output}
                self._bodies[(target.deployment, long)] = orjson.dumps(body)

    def __call__(self, target: Target, long: bool) -> bytes:
        return self._bodies[(target.deployment, long)]


class GarbageAnswer(Exception):
    pass


def _token_in(api: Api, line: str) -> bool | None:
    """True: a token; False: a chunk without text; None: the end of the stream."""
    if api is Api.OLLAMA:
        data = orjson.loads(line)
        if not isinstance(data, dict) or "error" in data:
            raise GarbageAnswer(line[:80])
        if data.get("done"):
            return None
        if "response" not in data and "message" not in data:
            raise GarbageAnswer(line[:80])
        return bool(data.get("response") or (data.get("message") or {}).get("content"))
    if not line.startswith("data:"):
        if line.startswith((":", "event:", "id:", "retry:")):
            return False
        raise GarbageAnswer(line[:80])
    payload = line[5:].strip()
    if payload == "[DONE]":
        return None
    data = orjson.loads(payload)
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list):
        raise GarbageAnswer(payload[:80])
    if not choices:
        return False  # a usage-only chunk
    choice = choices[0]
    text = (
        choice.get("text") if api is Api.COMPLETIONS else (choice.get("delta") or {}).get("content")
    )
    return bool(text)


async def _one_request(
    endpoint: Endpoint,
    target: Target,
    body: bytes,
    record: RequestRecord,
    timeout_s: float,
    clock: Callable[[], float],
) -> None:
    api = Api(target.api)
    start = clock()
    token_times: list[float] = []
    ended = False
    try:
        async with asyncio.timeout(timeout_s), endpoint.stream(target.path, body) as response:
            if response.status_code >= 400:
                record.error, record.detail = ERROR_HTTP, str(response.status_code)
                return
            # Read to the end of the body even after the stream's last event, so the
            # connection serves the next request.
            async for line in response.aiter_lines():
                if ended or not line.strip():
                    continue
                token = _token_in(api, line)
                if token is None:
                    ended = True
                elif token:
                    token_times.append(clock())
    except TimeoutError:
        record.error = ERROR_TIMEOUT
        return
    except ConnectFailed as error:
        record.error, record.detail = ERROR_REFUSED, str(error)[:120]
        return
    except (GarbageAnswer, orjson.JSONDecodeError, UnicodeDecodeError, AttributeError) as error:
        record.error, record.detail = ERROR_GARBAGE, str(error)[:120]
        return
    except (ProtocolFailed, ConnectionError, h11.ProtocolError) as error:
        record.error, record.detail = ERROR_PROTOCOL, f"{type(error).__name__}: {error}"[:120]
        return
    end = clock()
    if not token_times or not ended:
        record.error = ERROR_GARBAGE
        record.detail = "no tokens" if not token_times else "the stream ended without its end"
        return
    record.tokens = len(token_times)
    record.ttft_s = token_times[0] - start
    record.e2e_s = end - start
    if len(token_times) > 1:
        record.itl_s = (token_times[-1] - token_times[0]) / (len(token_times) - 1)


class _Live:
    """What the progress snapshot shows: per model, requests sent, done, failed, recent P99."""

    def __init__(self, plan: LoadTestPlan) -> None:
        self.model_of = {t.deployment: t.name for t in plan.targets}
        names = list(dict.fromkeys(self.model_of.values()))
        self.sent = dict.fromkeys(names, 0)
        self.completed = dict.fromkeys(names, 0)
        self.failed = dict.fromkeys(names, 0)
        self.recent: dict[str, deque[tuple[float, float]]] = {n: deque() for n in names}

    def done(self, record: RequestRecord, now_s: float) -> None:
        model = self.model_of[record.deployment]
        if record.error:
            self.failed[model] += 1
        else:
            self.completed[model] += 1
            self.recent[model].append((now_s, record.e2e_s))

    def snapshot(self, phase: Phase, elapsed_s: float, load_factor: float) -> dict:
        models = []
        for name, recent in self.recent.items():
            while recent and recent[0][0] < elapsed_s - LIVE_WINDOW_S:
                recent.popleft()
            p99 = percentile([e2e for _, e2e in recent], 99) * 1000 if recent else None
            models.append(
                {
                    "model": name,
                    "sent": self.sent[name],
                    "completed": self.completed[name],
                    "failed": self.failed[name],
                    "p99_e2e_ms": None if p99 is None else round(p99, 1),
                }
            )
        return {
            "phase": str(phase),
            "elapsed_s": round(elapsed_s, 1),
            "load_factor": round(load_factor, 3),
            "models": models,
        }


def _still_starting(probe: RequestRecord) -> bool:
    """Refused, timed out or "unavailable": what an engine answers while it loads."""
    if probe.error in (ERROR_REFUSED, ERROR_TIMEOUT):
        return True
    return probe.error == ERROR_HTTP and probe.detail in ("502", "503")


async def _cold_start(endpoints: dict[str, Endpoint], plan: LoadTestPlan) -> dict:
    skipped = plan.cold_start_skipped
    if skipped is not None:
        return {"ran": False, **skipped}
    started = time.monotonic()
    bodies = _Bodies(plan)

    async def restart(target: Target) -> tuple[str, float | None, str]:
        """Restart, then send one request a second until the engine answers it."""
        restarter = Endpoint(target.restart_url)
        try:
            async with (
                asyncio.timeout(COLD_START_WAIT_S),
                restarter.stream(urlsplit(target.restart_url).path, b"{}") as answer,
            ):
                async for _ in answer.aiter_lines():
                    pass
        except (TimeoutError, ConnectFailed, ProtocolFailed, ConnectionError) as error:
            return target.deployment, None, f"{type(error).__name__}"
        finally:
            restarter.close()
        if answer.status_code >= 400:
            return target.deployment, None, f"HTTP {answer.status_code}"
        endpoint = endpoints[target.deployment]
        while time.monotonic() - started < COLD_START_WAIT_S:
            probe = RequestRecord(target.deployment, 0.0, False)
            body = bodies(target, False)
            await _one_request(
                endpoint, target, body, probe, plan.request_timeout_s, time.monotonic
            )
            if not _still_starting(probe):
                # Up; an engine that answers garbage is up too, and the load reports it.
                return target.deployment, time.monotonic() - started, ""
            await asyncio.sleep(1.0)
        return target.deployment, None, "not ready"

    results = await asyncio.gather(*(restart(t) for t in plan.targets))
    return {
        "ran": True,
        "ready_s": {name: seconds for name, seconds, _ in results},
        "failed": {name: why for name, _, why in results if why},
    }


async def run_plan(
    plan: LoadTestPlan,
    *,
    progress: Callable[[dict], None] = lambda snapshot: None,
    cancelled: Callable[[], bool] = lambda: False,
    clock: Callable[[], float] = time.perf_counter,
    wall: Callable[[], float] = time.time,
) -> RunOutcome:
    endpoints = {target.deployment: Endpoint(target.request_url) for target in plan.targets}
    try:
        cold = await _cold_start(endpoints, plan)
        return await _drive(endpoints, plan, cold, progress, cancelled, clock, wall)
    finally:
        for endpoint in endpoints.values():
            endpoint.close()


async def _drive(endpoints, plan, cold, progress, cancelled, clock, wall) -> RunOutcome:
    bodies = _Bodies(plan)
    live = _Live(plan)
    records: list[RequestRecord] = []
    in_flight: dict[str, set[asyncio.Task]] = {t.deployment: set() for t in plan.targets}
    stop = asyncio.Event()
    started_wall, start = wall(), clock()
    phase_starts: dict[str, float] = {}

    def elapsed() -> float:
        return clock() - start

    async def arrivals(target: Target) -> None:
        seed = zlib.crc32(f"{plan.seed}/{target.deployment}".encode())
        rng = random.Random(seed)
        at = 0.0
        tasks = in_flight[target.deployment]
        endpoint, timeout_s = endpoints[target.deployment], plan.request_timeout_s
        # Thinning: arrivals at the highest rate of the test, each kept with the share of it
        # the plan offers at that moment, make a Poisson process whose rate follows the plan.
        peak = max(1.0, plan.phases.past_bound_max_factor if plan.phases.past_bound else 1.0)
        while not stop.is_set():
            at += rng.expovariate(target.rate_rps * peak)
            if at >= plan.duration_s:
                return
            if rng.random() * peak >= plan.load_factor(at):
                continue
            delay = at - elapsed()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    return
                except TimeoutError:
                    pass
            long = rng.random() < plan.mix.long_share
            record = RequestRecord(target.deployment, at, long)
            records.append(record)
            live.sent[target.name] += 1
            if len(tasks) >= MAX_IN_FLIGHT_PER_TARGET:
                record.error = ERROR_SHED
                live.done(record, elapsed())
                continue
            task = asyncio.create_task(
                _one_request(endpoint, target, bodies(target, long), record, timeout_s, clock)
            )
            tasks.add(task)
            task.add_done_callback(
                lambda done, r=record: (tasks.discard(done), live.done(r, elapsed()))
            )

    async def watch() -> bool:
        """Progress about once a second; True when the caller cancelled the test."""
        last_cancel_check = 0.0
        while not stop.is_set():
            now = elapsed()
            phase = plan.phase_at(now)
            phase_starts.setdefault(str(phase), round(now, 3))
            snapshot = live.snapshot(phase, now, plan.load_factor(now))
            await asyncio.to_thread(progress, snapshot)
            if now - last_cancel_check >= CANCEL_POLL_S:
                last_cancel_check = now
                if await asyncio.to_thread(cancelled):
                    stop.set()
                    return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROGRESS_EVERY_S)
        return False

    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(arrivals(t) for t in plan.targets))
    pending = [task for tasks in in_flight.values() for task in tasks]
    if pending and not stop.is_set():
        await asyncio.wait(pending, timeout=plan.request_timeout_s + 1)
    was_cancelled = stop.is_set()
    stop.set()
    for tasks in in_flight.values():
        for task in list(tasks):
            task.cancel()
    for record in records:
        if not record.error and record.e2e_s is None:
            record.error = ERROR_TIMEOUT  # cut off: the test ended or was cancelled
    was_cancelled = await watcher or was_cancelled
    final = live.snapshot(Phase.DONE, elapsed(), 0.0)
    await asyncio.to_thread(progress, final)
    return RunOutcome(
        started_at=started_wall,
        ended_at=wall(),
        records=records,
        cold_start=cold,
        cancelled=was_cancelled,
        phase_starts=phase_starts,
    )
