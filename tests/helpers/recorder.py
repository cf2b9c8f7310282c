"""A recording fake broker: just enough of Pulsar to make the official client talk, built on our codec.

:class:`Recorder` listens on a free loopback port and serves each connection
in its own thread. Inbound bytes are sliced into frames by their 4-byte total
size alone (independently of :class:`~pulsarwire.codec.FrameDecoder`), and
every frame is kept as a :class:`Captured`: the exact bytes from the wire plus
what our decoder made of them (or the error it raised). Tests drive the
official ``pulsar-client`` against it and assert on the captures.

Broker behaviour, deliberately minimal: CONNECT → CONNECTED (with a
configurable ``max_message_size``), PARTITIONED_METADATA → 0 partitions,
LOOKUP → Connect to this server, PRODUCER → PRODUCER_SUCCESS, SEND →
SEND_RECEIPT with entry ids counting from 0 in one ledger per topic (the
entry is stored), SUBSCRIBE/UNSUBSCRIBE/CLOSE_* → SUCCESS, PING → PONG,
GET_LAST_MESSAGE_ID → the last stored entry, FLOW → stored entries pushed as
MESSAGE frames within the permits. Entries can also be stored up front with
:meth:`Recorder.store`. Anything else is recorded and left unanswered.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsarwire.codec import (
    Frame,
    FrameDecoder,
    MessageId,
    Payload,
    encode_command,
    encode_payload_section,
    encode_with_stored_entry,
    new_command,
)
from pulsarwire.proto import pb

U32 = struct.Struct(">I")
T = pb.BaseCommand

SERVER_VERSION = "pulsarwire-recorder"
MAX_PROTOCOL_VERSION = 21
_U64 = 2**64
# Slicing bound for the recorder itself; far above anything a test sends.
_MAX_FRAME = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Captured:
    """One inbound frame: the exact wire bytes (size prefix included) and our decoding of them."""

    raw: bytes
    frame: Frame | None
    error: Exception | None = None

    @property
    def decoded(self) -> Frame:
        """The decoded frame; an AssertionError naming our decoder's error when it rejected the bytes."""
        if self.frame is None:
            raise AssertionError(f"frame could not be decoded: {self.error!r} (raw {self.raw[:64].hex()}...)")
        return self.frame

    @property
    def type(self) -> int:
        return self.decoded.type

    @property
    def command(self) -> pb.BaseCommand:
        return self.decoded.command

    @property
    def payload(self) -> Payload:
        payload = self.decoded.payload
        if payload is None:
            raise AssertionError(f"{T.Type.Name(self.type)} frame has no payload section")
        return payload


@dataclass(slots=True)
class StoredEntry:
    message_id: MessageId
    section: bytes  # [broker entry metadata] magic, checksum, metadata size, metadata, payload
    num_messages: int


@dataclass(slots=True)
class _Topic:
    name: str
    ledger_id: int
    entries: list[StoredEntry] = field(default_factory=list)


@dataclass(slots=True)
class _Consumer:
    conn: Connection
    consumer_id: int
    topic: _Topic
    cursor: int
    permits: int = 0


class Connection:
    """One client connection: its captured inbound frames and its serving thread."""

    def __init__(self, recorder: Recorder, sock: socket.socket, index: int) -> None:
        self.recorder = recorder
        self.index = index
        self._sock = sock
        self._send_lock = threading.Lock()
        self.captured: list[Captured] = []
        self.sent: list[bytes] = []
        self.client_protocol_version = 0
        self.thread = threading.Thread(target=self._serve, name=f"recorder-conn-{index}", daemon=True)

    # -- io ------------------------------------------------------------------
    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.sent.append(data)
            with contextlib.suppress(OSError):
                self._sock.sendall(data)

    def reply(self, cmd: pb.BaseCommand) -> None:
        self.send(encode_command(cmd))

    def ping(self) -> None:
        """Send a broker PING; the client must answer with a PONG."""
        self.reply(new_command(T.PING)[0])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()

    def _serve(self) -> None:
        buf = bytearray()
        try:
            while True:
                try:
                    chunk = self._sock.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while len(buf) >= 4:
                    (total,) = U32.unpack_from(buf, 0)
                    if total > _MAX_FRAME:
                        self.recorder._record(self, Captured(bytes(buf), None, ValueError(f"total {total}")))
                        return
                    if len(buf) < 4 + total:
                        break
                    raw = bytes(buf[: 4 + total])
                    del buf[: 4 + total]
                    self._handle_raw(raw)
        finally:
            self.recorder._on_disconnect(self)
            self.close()

    def _handle_raw(self, raw: bytes) -> None:
        decoder = FrameDecoder(_MAX_FRAME)
        decoder.feed(raw)
        try:
            frame = decoder.next_frame()
            decoder.eof()
        except Exception as exc:  # recorded for the test to report; the stream stays aligned
            self.recorder._record(self, Captured(raw, None, exc))
            return
        assert frame is not None
        self.recorder._record(self, Captured(raw, frame))
        try:
            self.recorder._respond(self, frame)
        except Exception as exc:  # a bug in the fake broker must show up in the test, not kill the thread
            self.recorder.errors.append(exc)


class Recorder:
    """The recording fake broker; use as a context manager or call start()/stop()."""

    def __init__(self, *, max_message_size: int = 5 * 1024 * 1024, ledger_base: int = 1000) -> None:
        self.max_message_size = max_message_size
        self._ledger_ids = itertools.count(ledger_base)
        self._producer_names = itertools.count()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.connections: list[Connection] = []
        self.errors: list[Exception] = []
        self._cond = threading.Condition()
        self._topics: dict[str, _Topic] = {}
        self._producers: dict[tuple[int, int], _Topic] = {}  # (connection index, producer_id)
        self._consumers: dict[tuple[int, int], _Consumer] = {}
        self._accept_thread = threading.Thread(target=self._accept, name="recorder-accept", daemon=True)
        self._stopped = False

    # -- lifecycle -------------------------------------------------------------
    def start(self) -> Recorder:
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            conns = list(self.connections)
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in conns:
            conn.close()
        self._accept_thread.join(5)
        for conn in conns:
            conn.thread.join(5)

    def __enter__(self) -> Recorder:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _accept(self) -> None:
        for index in itertools.count():
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, index)
            with self._cond:
                if self._stopped:
                    conn.close()
                    return
                self.connections.append(conn)
            conn.thread.start()

    # -- captures ------------------------------------------------------------
    def _record(self, conn: Connection, captured: Captured) -> None:
        with self._cond:
            conn.captured.append(captured)
            self._cond.notify_all()

    def _on_disconnect(self, conn: Connection) -> None:
        with self._cond:
            for key in [k for k, c in self._consumers.items() if c.conn is conn]:
                del self._consumers[key]
            self._cond.notify_all()

    def captured(self) -> list[Captured]:
        """Every inbound frame of every connection, in connection order then arrival order."""
        with self._cond:
            return [c for conn in self.connections for c in conn.captured]

    def captured_by_connection(self) -> list[list[Captured]]:
        """A snapshot of the inbound frames of each connection, in connection order."""
        with self._cond:
            return [list(conn.captured) for conn in self.connections]

    def frames(self, type_: int) -> list[Captured]:
        """Captured frames of one command type (all connections)."""
        return [c for c in self.captured() if c.frame is not None and c.frame.type == type_]

    def wait_for(self, predicate: Callable[[Recorder], bool], timeout: float = 10.0) -> None:
        """Block until ``predicate(self)`` holds (re-checked on every captured frame)."""
        with self._cond:
            if not self._cond.wait_for(lambda: predicate(self), timeout):
                kinds = [T.Type.Name(c.type) if c.frame else repr(c.error) for c in self.captured()]
                raise AssertionError(f"timed out waiting; frames so far: {kinds}")

    def wait_for_frames(self, type_: int, count: int = 1, timeout: float = 10.0) -> list[Captured]:
        self.wait_for(lambda r: len(r.frames(type_)) >= count, timeout)
        return self.frames(type_)

    # -- storage -------------------------------------------------------------
    def _topic(self, name: str) -> _Topic:
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = _Topic(name, next(self._ledger_ids))
        return topic

    def _append(self, topic: _Topic, section: bytes, num_messages: int) -> MessageId:
        mid = MessageId(topic.ledger_id, len(topic.entries))
        topic.entries.append(StoredEntry(mid, section, num_messages))
        return mid

    def store(
        self,
        topic: str,
        metadata: pb.MessageMetadata,
        payload: bytes,
        broker_entry_metadata: pb.BrokerEntryMetadata | None = None,
        *,
        checksum: bool = True,
    ) -> MessageId:
        """Append an entry built from ``metadata`` and ``payload`` (already compressed/batched);
        ``checksum=False`` stores it without the optional magic + CRC32C section."""
        section = encode_payload_section(metadata, payload, broker_entry_metadata, checksum=checksum)
        num = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        with self._cond:
            mid = self._append(self._topic(topic), section, num)
            consumers = [c for c in self._consumers.values() if c.topic.name == topic]
            for consumer in consumers:
                self._dispatch(consumer)
        return mid

    def entries(self, topic: str) -> list[StoredEntry]:
        with self._cond:
            return list(self._topic(topic).entries)

    def _dispatch(self, consumer: _Consumer) -> None:
        # Called with self._cond held.
        entries = consumer.topic.entries
        while consumer.permits > 0 and consumer.cursor < len(entries):
            entry = entries[consumer.cursor]
            consumer.cursor += 1
            consumer.permits -= entry.num_messages
            cmd, msg = new_command(T.MESSAGE)
            msg.consumer_id = consumer.consumer_id
            msg.message_id.CopyFrom(entry.message_id.to_proto())
            consumer.conn.send(encode_with_stored_entry(cmd, entry.section))

    # -- the fake broker -------------------------------------------------------
    def _respond(self, conn: Connection, frame: Frame) -> None:
        c = frame.command
        t = c.type
        if t == T.CONNECT:
            conn.client_protocol_version = c.connect.protocol_version
            cmd, sub = new_command(T.CONNECTED)
            sub.server_version = SERVER_VERSION
            sub.protocol_version = min(c.connect.protocol_version, MAX_PROTOCOL_VERSION)
            sub.max_message_size = self.max_message_size
            conn.reply(cmd)
        elif t == T.PING:
            conn.reply(new_command(T.PONG)[0])
        elif t == T.PONG:
            pass
        elif t == T.PARTITIONED_METADATA:
            cmd, sub = new_command(T.PARTITIONED_METADATA_RESPONSE)
            sub.request_id = c.partitionMetadata.request_id
            sub.partitions = 0
            sub.response = pb.CommandPartitionedTopicMetadataResponse.Success
            conn.reply(cmd)
        elif t == T.LOOKUP:
            cmd, sub = new_command(T.LOOKUP_RESPONSE)
            sub.request_id = c.lookupTopic.request_id
            sub.brokerServiceUrl = self.url
            sub.response = pb.CommandLookupTopicResponse.Connect
            sub.authoritative = True
            conn.reply(cmd)
        elif t == T.PRODUCER:
            with self._cond:
                self._producers[(conn.index, c.producer.producer_id)] = self._topic(c.producer.topic)
                name = c.producer.producer_name or f"recorder-{next(self._producer_names)}"
            cmd, sub = new_command(T.PRODUCER_SUCCESS)
            sub.request_id = c.producer.request_id
            sub.producer_name = name
            sub.last_sequence_id = -1
            conn.reply(cmd)
        elif t == T.SEND:
            self._on_send(conn, frame)
        elif t == T.SUBSCRIBE:
            self._on_subscribe(conn, c.subscribe)
        elif t == T.FLOW:
            with self._cond:
                consumer = self._consumers.get((conn.index, c.flow.consumer_id))
                if consumer is not None:
                    consumer.permits += c.flow.messagePermits
                    self._dispatch(consumer)
        elif t == T.CLOSE_PRODUCER:
            with self._cond:
                self._producers.pop((conn.index, c.close_producer.producer_id), None)
            self._success(conn, c.close_producer.request_id)
        elif t == T.CLOSE_CONSUMER:
            with self._cond:
                self._consumers.pop((conn.index, c.close_consumer.consumer_id), None)
            self._success(conn, c.close_consumer.request_id)
        elif t == T.UNSUBSCRIBE:
            with self._cond:
                self._consumers.pop((conn.index, c.unsubscribe.consumer_id), None)
            self._success(conn, c.unsubscribe.request_id)
        elif t == T.GET_LAST_MESSAGE_ID:
            self._on_get_last_message_id(conn, c.getLastMessageId)
        # ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES and anything else: recorded, not answered.

    def _success(self, conn: Connection, request_id: int) -> None:
        cmd, sub = new_command(T.SUCCESS)
        sub.request_id = request_id
        conn.reply(cmd)

    def _on_send(self, conn: Connection, frame: Frame) -> None:
        send = frame.command.send
        assert frame.payload is not None, "SEND without a payload section"
        with self._cond:
            topic = self._producers[(conn.index, send.producer_id)]
            mid = self._append(topic, frame.payload.entry, send.num_messages)
            for consumer in [c for c in self._consumers.values() if c.topic is topic]:
                self._dispatch(consumer)
        cmd, sub = new_command(T.SEND_RECEIPT)
        sub.producer_id = send.producer_id
        sub.sequence_id = send.sequence_id
        sub.message_id.CopyFrom(mid.to_proto())
        if send.HasField("highest_sequence_id"):
            sub.highest_sequence_id = send.highest_sequence_id
        conn.reply(cmd)

    def _on_subscribe(self, conn: Connection, sub_cmd: pb.CommandSubscribe) -> None:
        with self._cond:
            topic = self._topic(sub_cmd.topic)
            if sub_cmd.HasField("start_message_id"):
                start = MessageId.from_proto(sub_cmd.start_message_id)
                cursor = next(
                    (i for i, e in enumerate(topic.entries) if e.message_id >= start.entry()),
                    len(topic.entries),
                )
            elif sub_cmd.initialPosition == pb.CommandSubscribe.Earliest:
                cursor = 0
            else:
                cursor = len(topic.entries)
            self._consumers[(conn.index, sub_cmd.consumer_id)] = _Consumer(
                conn, sub_cmd.consumer_id, topic, cursor
            )
        self._success(conn, sub_cmd.request_id)

    def _on_get_last_message_id(self, conn: Connection, req: pb.CommandGetLastMessageId) -> None:
        with self._cond:
            consumer = self._consumers.get((conn.index, req.consumer_id))
            topic = consumer.topic if consumer is not None else None
            last = topic.entries[-1] if topic and topic.entries else None
        cmd, sub = new_command(T.GET_LAST_MESSAGE_ID_RESPONSE)
        sub.request_id = req.request_id
        if last is None:
            ledger = topic.ledger_id if topic else -1
            sub.last_message_id.ledgerId = ledger % _U64
            sub.last_message_id.entryId = -1 % _U64
        else:
            mid = last.message_id
            if last.num_messages > 1:
                mid = MessageId(mid.ledger_id, mid.entry_id, batch_index=last.num_messages - 1)
            sub.last_message_id.CopyFrom(mid.to_proto())
        conn.reply(cmd)
