"""The broker every process agrees on, from the environment alone.

Central processes read it through Django settings; host agents, which never load Django, read
it here directly. Reading it has no side effect: the folder broker makes its folders when a
process first opens a channel on it (`FolderTransport`), so a command that never touches the
broker leaves the disk alone.

The transport options follow the fault model: a consumer killed with its messages unacked
must not lose them, and a publish must not be taken for delivered before the broker has it.
- Redis keeps a delivered, unacked message aside and hands it out again only after the
  visibility timeout (BROKER_VISIBILITY_TIMEOUT_S). It must outlast the longest time a live
  consumer holds a message: a Celery task's run (acks_late, so up to CELERY_TASK_TIME_LIMIT;
  `manage.py check` refuses a shorter one) and an ingest group's write. Shorter, and a task
  still running is handed to a second worker. Every consumer of one Redis database sweeps
  the same unacked index with its own timeout, so all processes take it from here.
- RabbitMQ redelivers as soon as a consumer's connection drops, with no timeout; there each
  publish waits for the broker's confirm (`confirm_publish`), so an agent keeps a batch in
  its outbox until the broker has it.
- The folder broker is for one machine and for tests: unacked messages live in the
  consumer's memory, and a consumer killed with -9 loses its prefetched ones. A worker that
  may hold one message at a time (prefetch 1, acks_late) looks for the next one only at the
  next poll, so the poll is short: at kombu's 1 s a worker takes about one task a second and
  falls behind beat.
"""

import os
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import TRANSPORT_ALIASES, filesystem
from kombu.utils.encoding import bytes_to_str, str_to_bytes
from kombu.utils.json import dumps, loads

from inventory.env import env_float, env_str

BASE_DIR = Path(__file__).resolve().parents[2]  # the checkout


def broker_url() -> str:
    return env_str("CELERY_BROKER_URL") or "filesystem://"


FOLDER_POLL_S = 0.1

_REDIS_SCHEMES = {"redis", "rediss", "redis+socket", "sentinel"}
_AMQP_SCHEMES = {"amqp", "amqps", "pyamqp"}


def visibility_timeout_s() -> float:
    return env_float("BROKER_VISIBILITY_TIMEOUT_S", 360.0, minimum=1.0)


def broker_transport_options() -> dict:
    """kombu's transport options for the broker in use (see the module's docstring)."""
    url = broker_url()
    # Failover lists ("redis://a;redis://b") name one kind of broker.
    scheme = url.split(";", 1)[0].partition("://")[0].lower()
    if scheme in _REDIS_SCHEMES:
        return {"visibility_timeout": visibility_timeout_s()}
    if scheme in _AMQP_SCHEMES:
        return {"confirm_publish": True}
    if scheme != "filesystem":
        return {}
    return _folder_options()


def _folder_options() -> dict:
    folder = Path(env_str("CELERY_FILESYSTEM_BROKER_DIR") or BASE_DIR / "var" / "broker")
    return {
        "data_folder_in": os.fspath(folder / "queue"),
        "data_folder_out": os.fspath(folder / "queue"),
        "control_folder": os.fspath(folder / "control"),
        "store_processed": False,
        "polling_interval": FOLDER_POLL_S,
    }


class FolderChannel(filesystem.Channel):
    """kombu's filesystem channel, which expects its folders to exist, making them first, and
    which writes a message in place: a consumer listing the folder mid-write takes a file half
    written, fails to decode it and has already moved it out of the queue. Here a message is
    written under a name no consumer takes, then renamed into place (atomic in one folder).
    A connection opened without the transport options (a plain `Connection("filesystem://")`)
    still keeps its folders in the broker's folder: kombu's defaults are relative to the
    working directory, and would write `control/` into the checkout.

    The processes on one folder broker may be different users (the console's and the agent
    unit's, which owns the folder). kombu takes a message by moving it to the temporary
    folder, where a sticky /tmp forbids removing another user's file and another filesystem
    makes the move a copy two consumers can both make; here it is claimed by a rename inside
    its own folder. kombu also rewrites an exchange's table to bind a queue already bound,
    which another user's table (mode 0644) refuses; here a binding already there is left."""

    @property
    def transport_options(self):
        return {**_folder_options(), **self.connection.client.transport_options}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for folder in {self.data_folder_in, self.data_folder_out, self.control_folder}:
            Path(folder).mkdir(parents=True, exist_ok=True)

    def _put(self, queue, payload, **kwargs):
        folder = Path(self.data_folder_out)
        name = f"{round(monotonic() * 1000)}_{uuid.uuid4()}.{queue}.msg"
        writing = folder / f".{name}.part"  # not `<queue>.msg`: consumers pass it by
        try:
            writing.write_bytes(str_to_bytes(dumps(payload)))
            os.replace(writing, folder / name)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {name!r} to directory") from exc

    def _get(self, queue):
        if self.store_processed:
            return super()._get(queue)
        folder = Path(self.data_folder_in)
        wanted = f"{queue}.msg"
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = folder / f".{name}.{uuid.uuid4().hex}.taken"  # no consumer takes it
            try:
                os.rename(folder / name, claimed)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            try:
                payload = claimed.read_bytes()
                claimed.unlink()
            except OSError as exc:
                raise ChannelError(f"Cannot read file {name!r} from queue.") from exc
            return loads(bytes_to_str(payload))
        raise Empty()

    def _queue_bind(self, exchange, routing_key, pattern, queue):
        binding = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        if binding not in self.get_table(exchange):
            super()._queue_bind(exchange, routing_key, pattern, queue)


class FolderTransport(filesystem.Transport):
    Channel = FolderChannel


# Every process that reaches the broker has imported this module for its URL: from here on
# `filesystem://` means the transport above, for Celery apps and plain kombu connections alike.
TRANSPORT_ALIASES["filesystem"] = f"{__name__}:FolderTransport"
