"""Batches travel zlib-compressed, and whoever reads them inflates them with a bound.

A batch's JSON shrinks about tenfold (the same keys and card names in every row), and bytes are
what the broker pays for: Redis copies each message into its queue, into its unacked book and
out again. kombu compresses on publish when asked (`compression=`) and inflates on receipt from
the message's `compression` header, without any bound: a few kilobytes can inflate to
gigabytes. `bound_decompression` replaces kombu's decoders, in a process that reads batches,
with ones that stop at a limit (and refuses the formats batches never use), so a bomb becomes a
message with an error, which ingest dead-letters like any other.
"""

from __future__ import annotations

import bz2
import lzma
import zlib

from kombu import compression as kombu_compression

BATCH_COMPRESSION = "zlib"
MAX_BATCH_BYTES = 8 * 1024 * 1024

# kombu's content types for the formats it may know, by the library each needs.
_KOMBU_FORMATS = (
    "application/x-gzip",
    "application/x-bz2",
    "application/x-lzma",
    "application/x-brotli",
    "application/zstd",
    "application/x-snappy",
)


class TooLarge(ValueError):
    pass


def inflate(data: bytes, limit: int, decompressor) -> bytes:
    """At most `limit` bytes out of `data`; TooLarge when there would be more."""
    out = decompressor.decompress(data, limit + 1)
    if len(out) > limit or getattr(decompressor, "unconsumed_tail", b""):
        raise TooLarge(f"inflates to more than {limit} bytes")
    if isinstance(decompressor, bz2.BZ2Decompressor | lzma.LZMADecompressor) and (
        not decompressor.needs_input and not decompressor.eof
    ):
        raise TooLarge(f"inflates to more than {limit} bytes")
    return out


def _refused(content_type: str):
    def decode(data: bytes) -> bytes:
        raise ValueError(f"{content_type} is not a compression batches use")

    return decode


def bound_decompression(limit: int = MAX_BATCH_BYTES) -> None:
    """In this process, every compression kombu knows inflates at most `limit` bytes."""
    bounded = {
        "application/x-gzip": lambda data: inflate(data, limit, zlib.decompressobj()),
        "application/x-bz2": lambda data: inflate(data, limit, bz2.BZ2Decompressor()),
        "application/x-lzma": lambda data: inflate(data, limit, lzma.LZMADecompressor()),
    }
    for content_type in _KOMBU_FORMATS:
        try:
            encoder = kombu_compression.get_encoder(content_type)[0]
        except KeyError:
            continue  # kombu lacks the library for this one: it cannot inflate it either
        decoder = bounded.get(content_type) or _refused(content_type)
        kombu_compression.register(encoder, decoder, content_type)
