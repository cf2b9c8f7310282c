"""Messages read through the admin API (peek, examine, get-message-by-id), printed as pulsar-admin does.

Pulsar answers one stored entry per request: its payload (decompressed; a batch whole) as the
body and its metadata in ``X-Pulsar-*`` headers (``X-Pulsar-Message-ID``, ``X-Pulsar-publish-time``
as ISO-8601, the properties as a JSON object in ``X-Pulsar-PROPERTY`` -- a header per key,
``X-Pulsar-PROPERTY-<key>``, before Pulsar 4 --, ``X-Pulsar-num-batch-message`` for a batch...).
:func:`messages_of` turns one such answer into :class:`PeekedMessage` values as Pulsar's admin
client does (``TopicsImpl.getMessagesFromHttpResponse``): a batch is split into its messages,
``ledger:entry:index`` each, with the batch's properties and their own. :func:`format_message`
prints one as ``pulsar-admin topics peek-messages`` does: the id, publish and event times (ms),
the properties as JSON, then the payload as Netty's ``ByteBufUtil.prettyHexDump``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from pulsarwire.codec.batch import split_batch
from pulsarwire.io.http import Answer

_PROPERTY = "x-pulsar-property-"
#: the separator pulsar-admin prints between two peeked messages
SEPARATOR = "-" * 73 + "\n"


@dataclass(frozen=True)
class PeekedMessage:
    message_id: str
    batch_index: int
    publish_time: int
    event_time: int
    deliver_at_time: int
    properties: dict[str, str] = field(default_factory=dict)
    data: bytes = b""


def _ms(text: str | None) -> int:
    """Milliseconds of an ISO-8601 time with offset (Pulsar's DateFormatter); 0 when absent or bad."""
    if not text:
        return 0
    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def messages_of(answer: Answer) -> list[PeekedMessage]:
    """The messages of one admin answer carrying an entry (a batch: each of its messages).

    Raises the codec's typed errors for a batch whose bytes do not hold what the headers say.
    """
    first: dict[str, str] = {}
    properties: dict[str, str] = {}
    for name, value in answer.raw_headers:
        lower = name.lower()
        if lower == "x-pulsar-property":  # Pulsar 4: one JSON object
            try:
                doc = json.loads(value)
            except ValueError:
                doc = None
            if isinstance(doc, dict):
                properties.update({str(k): str(v) for k, v in doc.items()})
        elif lower.startswith(_PROPERTY):  # earlier releases: a header per key
            properties[name[len(_PROPERTY) :]] = value
        first.setdefault(lower, value)
    message_id = first.get("x-pulsar-message-id", "")
    publish = _ms(first.get("x-pulsar-publish-time"))
    event = _ms(first.get("x-pulsar-event-time"))
    deliver = _ms(first.get("x-pulsar-deliver-at-time"))
    batch = first.get("x-pulsar-num-batch-message")
    encrypted = first.get("x-pulsar-is-encrypted", "false").lower() == "true"
    if batch is None or encrypted:
        return [PeekedMessage(message_id, -1, publish, event, deliver, properties, answer.body)]
    metas, payloads = split_batch(answer.body, int(batch))
    out = []
    for i, (md, payload) in enumerate(zip(metas, payloads, strict=True)):
        own = {**properties, **{kv.key: kv.value for kv in md.properties}}
        event_time = md.event_time if md.HasField("event_time") else event
        out.append(PeekedMessage(f"{message_id}:{i}", i, publish, event_time, deliver, own, payload))
    return out


def hex_dump(data: bytes) -> str:
    """``data`` as Netty's ``ByteBufUtil.prettyHexDump`` writes it (16 bytes a row, offsets, ASCII)."""
    if not data:
        return ""
    lines = [
        "         +-------------------------------------------------+",
        "         |  0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f |",
        "+--------+-------------------------------------------------+----------------+",
    ]
    for row in range(0, len(data), 16):
        chunk = data[row : row + 16]
        hexes = "".join(f" {b:02x}" for b in chunk).ljust(48)
        text = "".join(chr(b) if 0x20 <= b < 0x7F else "." for b in chunk).ljust(16)
        lines.append(f"|{row:08x}|{hexes} |{text}|")
    lines.append("+--------+-------------------------------------------------+----------------+")
    return "\n".join(lines)


def pretty_json(value: object) -> str:
    """JSON as pulsar-admin prints it (Jackson's default pretty printer: two spaces, ``"key" : value``)."""
    return json.dumps(value, indent=2, separators=(",", " : "), ensure_ascii=False)


def format_message(message: PeekedMessage) -> str:
    """One message as ``pulsar-admin topics peek-messages`` / ``examine-message`` print it."""
    label = "Batch Message ID" if message.batch_index >= 0 else "Message ID"
    lines = [
        f"{label}: {message.message_id}",
        f"Publish time: {message.publish_time}",
        f"Event time: {message.event_time}",
    ]
    if message.deliver_at_time:
        lines.append(f"Deliver at time: {message.deliver_at_time}")
    if message.properties:
        lines += ["Properties:", pretty_json(dict(sorted(message.properties.items())))]
    lines.append(hex_dump(message.data))
    return "\n".join(lines) + "\n"


def format_messages(messages: Iterable[PeekedMessage]) -> str:
    """Several messages, separated as pulsar-admin separates them."""
    return "".join((SEPARATOR + "\n" if i else "") + format_message(m) for i, m in enumerate(messages))
