"""OpenAI- and Ollama-compatible inference endpoints on localhost, for simulated deployments.

A fake inference server where hardware is absent: the same paths, the same streaming shapes
(OpenAI server-sent events ending in ``data: [DONE]``; Ollama's newline-delimited JSON ending
in ``"done": true``) and the same error answers (404 for an unknown model, 503 while a replica
is down). What it answers and how slowly is decided by a :class:`Behaviour`:
:class:`SimulatedBehaviour` follows the fleet simulator's co-location model, so the latency of
a deployment that time-slices its cards rises with its co-tenants' load while one bound to its
own card group does not, and the requests in flight add to the replica's concurrency (its KV
cache grows with them); :class:`FixedBehaviour` answers with a latency it was told, for tests
and the runner's bench.

Paths: ``/<host>/<deployment>/v1/completions``, ``/v1/chat/completions``, ``/api/generate``,
``/api/chat``; ``POST /<host>/<deployment>/restart`` restarts the replica (a cold start).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from inventory.telemetry.simulator.latency import SPREAD_SIGMA

_API_PATHS = ("/v1/completions", "/v1/chat/completions", "/api/generate", "/api/chat")
_MAX_BODY = 1 << 20
_MAX_TOKENS = 4096


@dataclass(frozen=True)
class Answer:
    ttft_s: float
    e2e_s: float
    tokens: int
    mode: str = "ok"  # "ok", "garbage" (not the API's shape), "hang" (never answers)
    status: int = 200


class Behaviour(Protocol):
    def answer(self, key: str, body: dict) -> Answer | None: ...  # None: no such model
    def restart(self, key: str) -> bool: ...
    def started(self, key: str) -> None: ...
    def finished(self, key: str) -> None: ...


def _requested_tokens(body: dict) -> int:
    options = body.get("options") if isinstance(body.get("options"), dict) else {}
    wanted = body.get("max_tokens") or options.get("num_predict") or 16
    return max(1, min(_MAX_TOKENS, int(wanted))) if isinstance(wanted, int | float) else 16


class FixedBehaviour:
    """Every request of ``key`` takes ``e2e_s``, its first token after ``ttft_s``."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        self.answers = answers
        self.in_flight = dict.fromkeys(answers, 0)

    def answer(self, key: str, body: dict) -> Answer | None:
        return self.answers.get(key)

    def restart(self, key: str) -> bool:
        return key in self.answers

    def started(self, key: str) -> None:
        self.in_flight[key] = self.in_flight.get(key, 0) + 1

    def finished(self, key: str) -> None:
        self.in_flight[key] -= 1


class SimulatedBehaviour:
    """Latency from the simulator's replica state: the median its co-location model gives
    (service, queueing, interference), spread lognormally, with the interference's bursts."""

    # A decode step's share of the median: the rest is prefill and queueing (the first token).
    PREFILL_SHARE = 0.25

    def __init__(self, hosts: dict, seed: int = 0) -> None:
        self._hosts = hosts  # name -> SimulatedHost
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def _replica(self, key: str):
        host_name, _, deployment = key.partition("/")
        host = self._hosts.get(host_name)
        if host is None:
            return None, None
        try:
            return host, host.replica(deployment)
        except KeyError:
            return host, None

    def answer(self, key: str, body: dict) -> Answer | None:
        from inventory.telemetry.simulator.host import _BURST_FRACTION, _BURST_HIT, _BURST_MISS

        _, replica = self._replica(key)
        if replica is None:
            return None
        if not replica.up:
            return Answer(0.0, 0.0, 0, mode="ok", status=503)
        interference = replica.interference_s
        base = max(0.005, replica.latency_median_s - interference)
        with self._lock:
            burst = self._rng.random() < _BURST_FRACTION
            spread = math.exp(self._rng.gauss(0.0, SPREAD_SIGMA))
        median = base + (_BURST_HIT if burst else _BURST_MISS) * interference
        e2e = median * spread
        return Answer(e2e * self.PREFILL_SHARE, e2e, _requested_tokens(body))

    def restart(self, key: str) -> bool:
        host, replica = self._replica(key)
        if replica is None:
            return False
        host.restart_replica(replica.spec.deployment_id)
        return True

    def started(self, key: str) -> None:
        _, replica = self._replica(key)
        if replica is not None:
            replica.extra_concurrency += 1

    def finished(self, key: str) -> None:
        _, replica = self._replica(key)
        if replica is not None:
            replica.extra_concurrency -= 1


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(path: str, model: str, index: int, last: bool) -> bytes:
    if path.startswith("/api/"):
        if last:
            return json.dumps({"model": model, "response": "", "done": True}).encode() + b"\n"
        key = "message" if path == "/api/chat" else "response"
        value = {"role": "assistant", "content": "tok "} if key == "message" else "tok "
        return json.dumps({"model": model, key: value, "done": False}).encode() + b"\n"
    if last:
        return b"data: [DONE]\n\n"
    if path == "/v1/chat/completions":
        choice = {"index": 0, "delta": {"content": "tok "}, "finish_reason": None}
        kind = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": "tok ", "finish_reason": None}
        kind = "text_completion"
    data = {"id": f"cmpl-{index}", "object": kind, "model": model, "choices": [choice]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


class EndpointServer:
    """An HTTP/1.1 server (keep-alive, chunked streaming) over a behaviour."""

    def __init__(self, behaviour: Behaviour, host: str = "127.0.0.1", port: int = 0) -> None:
        self.behaviour = behaviour
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._connection, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    def start_in_thread(self) -> int:
        """Serve from a daemon thread of this process; returns the port once it listens. A
        port that cannot be bound raises the bind's own OSError here, in the caller."""
        ready = threading.Event()
        failed: list[OSError] = []

        def serve() -> None:
            self._loop = asyncio.new_event_loop()
            try:
                self._loop.run_until_complete(self.start())
            except OSError as error:
                failed.append(error)
                return
            finally:
                ready.set()
            self._loop.run_forever()

        threading.Thread(target=serve, name="sim-endpoints", daemon=True).start()
        if not ready.wait(10):
            raise RuntimeError("the simulated endpoints did not start listening")
        if failed:
            raise failed[0]
        return self.port

    async def _connection(self, reader, writer) -> None:
        try:
            while await self._request(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    async def _request(self, reader, writer) -> bool:
        line = await reader.readline()
        if not line:
            return False
        method, target, _ = line.decode("latin-1").split(" ", 2)
        length = 0
        while True:
            header = await reader.readline()
            if header in (b"\r\n", b"\n", b""):
                break
            name, _, value = header.decode("latin-1").partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if length > _MAX_BODY:
            await self._plain(writer, 413, b"too large")
            return False
        raw = await reader.readexactly(length) if length else b""
        path = target.split("?", 1)[0]
        if method == "POST" and path.endswith("/restart"):
            done = self.behaviour.restart(path[1 : -len("/restart")])
            await self._plain(writer, 200 if done else 404, b"restarted" if done else b"unknown")
            return True
        api = next((p for p in _API_PATHS if path.endswith(p)), None)
        if api is None or method != "POST":
            await self._plain(writer, 404, b"not found")
            return True
        key = path[1 : -len(api)]
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            await self._plain(writer, 400, b'{"error": "body is not JSON"}')
            return True
        answer = self.behaviour.answer(key, body if isinstance(body, dict) else {})
        if answer is None:
            await self._plain(writer, 404, b'{"error": "model not found"}')
            return True
        if answer.status != 200:
            await self._plain(writer, answer.status, b'{"error": "unavailable"}')
            return True
        self.behaviour.started(key)
        try:
            await self._stream(writer, api, str(body.get("model", key)), answer)
        finally:
            self.behaviour.finished(key)
        return True

    async def _plain(self, writer, status: int, body: bytes) -> None:
        writer.write(
            b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (status, len(body), body)
        )
        await writer.drain()

    async def _stream(self, writer, api: str, model: str, answer: Answer) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        kind = b"application/x-ndjson" if api.startswith("/api/") else b"text/event-stream"
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: %s\r\ntransfer-encoding: chunked\r\n\r\n" % kind
        )
        if answer.mode == "hang":
            await asyncio.sleep(3600)
            return
        if answer.mode == "garbage":
            await asyncio.sleep(answer.ttft_s)
            writer.write(_chunk(b"<html>502 Bad Gateway</html>\n") + b"0\r\n\r\n")
            await writer.drain()
            return
        gap = (answer.e2e_s - answer.ttft_s) / max(1, answer.tokens - 1)
        for index in range(answer.tokens):
            due = start + answer.ttft_s + index * gap
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            writer.write(_chunk(_event(api, model, index, last=False)))
        writer.write(_chunk(_event(api, model, answer.tokens, last=True)) + b"0\r\n\r\n")
        await writer.drain()


def serve_forever(behaviour: Behaviour, port: int, on_ready: Callable[[int], None]) -> None:
    """Run a server in this thread until the process ends (the bench's endpoint process)."""

    async def main() -> None:
        server = EndpointServer(behaviour, port=port)
        on_ready(await server.start())
        await asyncio.Event().wait()

    asyncio.run(main())
