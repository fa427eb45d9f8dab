"""The payload codec: zlib compression of every large payload the product sends through Temporal.

Temporal stores each update's input, each result and the state carried across continue-as-new
in the workflow history, and suggests continue-as-new once a history reaches 4 MiB; agent
transcripts (text, JSON tool arguments, tool output) compress about 3.5 to 4 times with zlib,
so a run holds that many more events before it continues as new, and the server writes that
much less per update. ``ZlibCodec`` is a ``temporalio.converter.PayloadCodec`` (the SDK's
interface for encryption and compression, applied by the client and the worker to every
payload they send and receive, queries included):

- ``encode`` replaces a payload of at least ``COMPRESS_MIN_BYTES`` (serialized) by one of
  encoding ``binary/zlib`` whose data is the zlib stream of the whole serialized payload
  (metadata included), when that is smaller; smaller payloads pass unchanged, since there
  compression saves nothing worth its CPU. A payload whose first ``SAMPLE_BYTES`` barely
  compress (over ``DENSE_RATIO``: sealed event text, base64 ciphertext) is coded by Huffman
  alone (zlib's ``Z_HUFFMAN_ONLY``, the same stream format, so ``decode`` is unchanged):
  its repeated strings are too few to pay for the search for them.
- ``decode`` restores such payloads and passes every other one through unchanged, so the
  histories written before the codec (and every payload the codec left alone) still decode,
  and a worker with the codec replays them (``tests/histories``).

The payload budget (``contract.MAX_PAYLOAD_BYTES``) stays measured on the JSON before
compression: a payload the codec could not compress still fits. Search attributes and the
codec's own metadata are not compressed (the server reads them). A worker or client without
this codec cannot read compressed payloads: every process of a deployment, and every
``Replayer``, takes its data converter from here (``DATA_CONVERTER``, which
``plugin.AgentTasksPlugin`` gives ``config.connect``'s clients and ``cli.replay_check``; the
rebuild takes its client's).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

ENCODING = b"binary/zlib"
"""The ``encoding`` metadata of a compressed payload."""
COMPRESS_MIN_BYTES = 1024
"""Serialized payloads smaller than this pass uncompressed (a single short event, a write's
outcome): compressing them saves a few hundred bytes at most."""
COMPRESS_LEVEL = 1
"""zlib's fastest level: 3.5x on the shipped trajectories at about 100 MB/s, where the default
level 6 gives 4.3x at a third of the speed (the mirror's queries compress every event page
again, so speed counts twice)."""
SAMPLE_BYTES = 2048
"""The head of a payload compressed first, to choose how to compress the whole."""
DENSE_RATIO = 0.6
"""A payload whose sample compresses to more than this fraction of its size is coded by
Huffman alone: sealed events' text (base64 of ciphertext) sample at about 0.77, and the whole
compresses to 0.67 at level 1 and 0.76 by Huffman alone in a third of the time; the shipped
trajectories' plain text samples at about 0.48."""
MAX_DECODED_BYTES = 16 * 1024 * 1024
"""A compressed payload decodes to at most this many bytes (the product's payloads are at
most 400 KiB of JSON, Temporal's at most 2 MiB compressed); a larger one is refused rather
than inflated without bound."""


class ZlibCodec(PayloadCodec):
    """Compresses payloads of at least ``COMPRESS_MIN_BYTES`` with zlib; decodes only its own
    encoding and passes every other payload through (see the module docstring)."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Compress each large payload when that makes it smaller."""
        return [compress(p) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Restore compressed payloads; others unchanged.

        Raises:
            ValueError: a compressed payload is corrupt or inflates past ``MAX_DECODED_BYTES``.
        """
        return [decompress(p) for p in payloads]


def compress(payload: Payload) -> Payload:
    """``payload`` compressed (``binary/zlib``), or itself when small or incompressible."""
    raw = payload.SerializeToString()
    if len(raw) < COMPRESS_MIN_BYTES:
        return payload
    sample = raw[:SAMPLE_BYTES]
    if len(raw) > SAMPLE_BYTES and len(zlib.compress(sample, 1)) > DENSE_RATIO * len(sample):
        huffman = zlib.compressobj(COMPRESS_LEVEL, strategy=zlib.Z_HUFFMAN_ONLY)
        packed = huffman.compress(raw) + huffman.flush()
    else:
        packed = zlib.compress(raw, COMPRESS_LEVEL)
    if len(packed) >= len(raw):
        return payload
    return Payload(metadata={"encoding": ENCODING}, data=packed)


def decompress(payload: Payload) -> Payload:
    """The original of a ``binary/zlib`` payload; any other payload unchanged.

    Raises:
        ValueError: the data is not a zlib stream of a payload, or inflates past
            ``MAX_DECODED_BYTES``.
    """
    if payload.metadata.get("encoding") != ENCODING:
        return payload
    inflate = zlib.decompressobj()
    try:
        raw = inflate.decompress(payload.data, MAX_DECODED_BYTES)
    except zlib.error as err:
        raise ValueError(f"corrupt {ENCODING.decode()} payload: {err}") from err
    if inflate.unconsumed_tail or not inflate.eof:
        raise ValueError(
            f"{ENCODING.decode()} payload is truncated or inflates past {MAX_DECODED_BYTES} bytes"
        )
    try:
        return Payload.FromString(raw)
    except DecodeError as err:
        raise ValueError(f"{ENCODING.decode()} payload holds no payload: {err}") from err


DATA_CONVERTER: DataConverter = dataclasses.replace(
    pydantic_data_converter, payload_codec=ZlibCodec()
)
"""The data converter of every client, worker and replayer of the product: pydantic models
(``temporalio.contrib.pydantic``) with ``ZlibCodec``."""
