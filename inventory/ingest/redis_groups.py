"""Taking a whole group off a Redis queue in one round trip, the way kombu takes one message.

kombu's Redis transport pops one message at a time and books each in its `unacked` hash and
`unacked_index` sorted set before handing it over, then removes it from both on its ack:
three round trips a message, the ceiling of ingest through Redis. The group taker does the
same bookkeeping, in the same keys and the same format, for up to a group of messages in one
Lua call, and acks a group in one pipeline. A worker killed before the ack leaves its group
in `unacked`, where kombu's own `restore_visible` (run here too, and by every kombu consumer
of the broker) puts it back on the queue once the visibility timeout has passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from kombu import Queue

# Pops up to ARGV[1] messages from KEYS[1] and books each as kombu's QoS.append does: the raw
# message text, its exchange and routing key under its delivery tag, the time in the index.
_TAKE = """
local taken = {}
for _ = 1, tonumber(ARGV[1]) do
  local item = redis.call('RPOP', KEYS[1])
  if not item then break end
  local ok, envelope = pcall(cjson.decode, item)
  local properties = ok and type(envelope) == 'table' and envelope['properties']
  local info = type(properties) == 'table' and properties['delivery_info']
  -- What is not kombu's is handed over unbooked, for ingest to keep as a dead letter.
  if type(info) == 'table' and type(properties['delivery_tag']) == 'string' then
    redis.call('HSET', KEYS[2], properties['delivery_tag'],
               '[' .. item .. ',' .. cjson.encode(info['exchange']) .. ','
                   .. cjson.encode(info['routing_key']) .. ']')
    redis.call('ZADD', KEYS[3], ARGV[2], properties['delivery_tag'])
  end
  taken[#taken + 1] = item
end
return taken
"""

# How often the taker restores what dead consumers left unacknowledged, as kombu's loop does.
RESTORE_EVERY_S = 10.0


@dataclass
class Taken:
    """One message of a group: acked with the rest of its group, never on its own."""

    body: bytes
    headers: dict[str, Any]
    delivery_tag: str | None  # None: not a kombu message, so never booked
    group: GroupTaker
    errors: list  # kombu's: what decoding the body raised (an unknown compression, a bomb)

    def ack(self) -> None:
        if self.delivery_tag is not None:
            self.group.acked.append(self.delivery_tag)


class GroupTaker:
    def __init__(self, connection, queue: Queue, acked: list[str] | None = None):
        self.channel = connection.default_channel
        self.client = self.channel.client
        queue(self.channel).declare()
        self.queue = queue.name
        self._take = self.client.register_script(_TAKE)
        # Shared with the taker before a reconnect, so acks of a group in hand are not lost.
        self.acked: list[str] = [] if acked is None else acked
        self._restored_at = 0.0

    def take(self, most: int) -> list[Taken]:
        self._maybe_restore()
        keys = [self.queue, self.channel.unacked_key, self.channel.unacked_index_key]
        return list(self._decoded(self._take(keys=keys, args=[most, time.time()])))

    def _decoded(self, items: list[bytes]) -> Iterator[Taken]:
        for item in items:
            envelope = _envelope(item)
            if envelope is None:
                refused = ValueError("not a kombu message")
                yield Taken(item, {}, None, self, [(ValueError, refused, None)])
                continue
            try:
                message = self.channel.Message(envelope, channel=self.channel)
            except Exception as error:  # a body that is not what its encoding says
                tag = envelope["properties"]["delivery_tag"]
                yield Taken(item, {}, tag, self, [(type(error), error, None)])
                continue
            yield Taken(
                message.body, message.headers or {}, message.delivery_tag, self, message.errors
            )

    def flush_acks(self) -> None:
        """Remove every message acked since the last call from the books, in one pipeline."""
        if not self.acked:
            return
        # Two variadic commands for the whole group, not two for each message.
        with self.client.pipeline(transaction=False) as pipe:
            pipe.zrem(self.channel.unacked_index_key, *self.acked)
            pipe.hdel(self.channel.unacked_key, *self.acked)
            pipe.execute()
        self.acked.clear()

    def _maybe_restore(self) -> None:
        if time.monotonic() - self._restored_at >= RESTORE_EVERY_S:
            self._restored_at = time.monotonic()
            # interval=1: kombu otherwise acts on one call in ten, and this one is paced already.
            self.channel.qos.restore_visible(interval=1)


def _envelope(item: bytes) -> dict | None:
    """kombu's message as the Lua script booked it, or None for anything else on the queue."""
    try:
        envelope = orjson.loads(item)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(envelope, dict) or not isinstance(envelope.get("properties"), dict):
        return None
    properties = envelope["properties"]
    if not isinstance(properties.get("delivery_tag"), str):
        return None
    if not isinstance(properties.get("delivery_info"), dict):
        return None
    if not isinstance(envelope.get("headers", {}), dict):
        return None
    return envelope
