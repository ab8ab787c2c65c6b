"""A lean HTTP/1.1 client for the load-test runner: h11 over asyncio streams (pure).

The runner's whole job is to send requests and time their streamed answers; a general client
(httpx: its models, anyio, and a connection pool that polls every idle connection for each
request it places) spends about 3 ms of CPU a request, which caps one core near 300 req/s and
puts its own scheduling delays into the measured tail. This one keeps per endpoint a stack of
idle keep-alive connections and lets h11 do the protocol (chunked bodies, content length,
keep-alive), so a request costs a fraction of that.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import h11

_READ = 65536


class ConnectFailed(Exception):
    """The endpoint refused the connection, or its name does not resolve."""


class ProtocolFailed(Exception):
    """The endpoint broke HTTP: closed mid-answer, or sent what is not HTTP/1.1."""


class _Connection:
    __slots__ = ("h11", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h11 = h11.Connection(h11.CLIENT)

    async def next_event(self):
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await self.reader.read(_READ))

    def close(self) -> None:
        self.writer.close()


class Response:
    def __init__(self, connection: _Connection, status: int) -> None:
        self._connection = connection
        self.status_code = status
        self.complete = False

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines, decoded, to its end (so the connection can be used again)."""
        pending = b""
        while True:
            event = await self._connection.next_event()
            if isinstance(event, h11.Data):
                pending += event.data
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    yield line.decode().rstrip("\r")
            elif isinstance(event, h11.EndOfMessage):
                self.complete = True
                if pending:
                    yield pending.decode()
                return
            else:
                raise ProtocolFailed(f"unexpected {type(event).__name__}")


class Endpoint:
    """Keep-alive connections to one endpoint (scheme, host and port of ``url``)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or ""
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.authority = parts.netloc.encode()
        self._idle: list[_Connection] = []
        self._tls_context = ssl.create_default_context() if self.tls else None

    async def _open(self) -> _Connection:
        try:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self._tls_context, limit=_READ
            )
        except OSError as error:
            raise ConnectFailed(f"{self.host}:{self.port}: {error.strerror or error}") from None
        return _Connection(reader, writer)

    @asynccontextmanager
    async def stream(self, path: str, body: bytes) -> AsyncIterator[Response]:
        """POST ``body`` as JSON and hand back the answer as it streams in."""
        reused = bool(self._idle)
        connection = self._idle.pop() if reused else await self._open()
        try:
            status = await self._send(connection, path, body)
        except (ConnectionError, h11.RemoteProtocolError, ProtocolFailed):
            connection.close()
            if not reused:
                raise ProtocolFailed("the connection broke before an answer") from None
            # An idle connection the server had closed meanwhile: once more, on a new one.
            connection = await self._open()
            status = await self._send(connection, path, body)
        response = Response(connection, status)
        try:
            yield response
        except BaseException:
            connection.close()
            raise
        if response.complete and connection.h11.our_state is h11.DONE:
            try:
                connection.h11.start_next_cycle()
            except h11.LocalProtocolError:
                connection.close()
            else:
                self._idle.append(connection)
        else:
            connection.close()

    async def _send(self, connection: _Connection, path: str, body: bytes) -> int:
        request = h11.Request(
            method="POST",
            target=path,
            headers=[
                (b"host", self.authority),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        )
        try:
            connection.writer.write(
                connection.h11.send(request)
                + connection.h11.send(h11.Data(data=body))
                + connection.h11.send(h11.EndOfMessage())
            )
            await connection.writer.drain()
            while True:
                event = await connection.next_event()
                if isinstance(event, h11.Response):
                    return event.status_code
                if isinstance(event, h11.InformationalResponse):
                    continue
                raise ProtocolFailed(f"unexpected {type(event).__name__}")
        except h11.RemoteProtocolError as error:
            raise ProtocolFailed(str(error)) from None

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()
