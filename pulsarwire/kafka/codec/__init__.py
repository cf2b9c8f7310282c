"""Sans-IO Kafka codec: message definitions as data, a generic encoder/decoder, record batches,
compression and framing.

- ``definitions.py``: facts generated from apache/kafka by ``_generate.py`` (which also writes
  ``pulsarwire/kafka/error_codes.py``)
- ``primitives.py``: integers, varints, strings, bytes, arrays (compact and classic)
- ``messages.py``: the generic codec and the request/response headers
- ``records.py`` / ``compression.py``: record batches v2, legacy message sets, codecs
- ``frames.py``: the 4-byte size framing and request/response correlation
"""

from __future__ import annotations

from pulsarwire.kafka.codec.frames import Correlator, FrameSplitter, join
from pulsarwire.kafka.codec.messages import (
    API_KEYS,
    API_NAMES,
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    versions,
)
from pulsarwire.kafka.codec.records import Record, RecordBatch, decode_batch, decode_batches, encode_batch

__all__ = [
    "API_KEYS",
    "API_NAMES",
    "Correlator",
    "FrameSplitter",
    "Record",
    "RecordBatch",
    "Request",
    "decode_batch",
    "decode_batches",
    "decode_request",
    "decode_response",
    "encode_batch",
    "encode_request",
    "encode_response",
    "join",
    "versions",
]
