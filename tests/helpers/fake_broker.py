"""A scripted fake broker for client tests: what no honest broker of ours would send, over a real socket.

:class:`ScriptedBroker` is the recording fake broker of ``tests.helpers.recorder`` (frames built
with ``pulsarwire.codec``, one thread per connection, every inbound frame captured) with what
the client suites need on top:

* ``script(type_, answer)``: ``answer(conn, frame)`` handles every inbound command of that type
  before the recorder does; it returns True when it answered (the recorder then stays out).
  Helpers build the usual answers: :func:`error_answer`, :func:`lookup_answer`.
* ``store_section(topic, section, num_messages)``: append an entry exactly as given — without the
  checksum section, with a batch count that lies, with garbage — and dispatch it to subscribers.
  ``num_messages`` is what the broker charges in permits for it: the count as the metadata
  says, as Pulsar's dispatcher takes it — 0 costs nothing, a negative count gives permits —
  while a charge above the permits left takes them to 0 (as our broker does), not below.
* ``tls``: the broker speaks TLS (``pulsar+ssl://localhost:<port>``).
* acknowledgements are remembered per subscription: a resubscribe (after
  :meth:`drop_connections`) gets only what was not acknowledged, as from a durable cursor, and
  REDELIVER_UNACKNOWLEDGED_MESSAGES sends the named entries again.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from pulsarwire.codec import Frame, MessageId, encode_with_stored_entry, new_command
from pulsarwire.proto import pb
from tests.helpers.recorder import Connection, Recorder, StoredEntry, _Consumer

T = pb.BaseCommand
Answer = Callable[[Connection, Frame], bool]


@dataclass
class _Books:
    subscription: str
    replay: list[int] = field(default_factory=list)  # indexes of entries to send again first


class ScriptedBroker(Recorder):
    """``tls``: a server-side SSLContext; the broker then speaks TLS only, at ``pulsar+ssl://localhost``."""

    def __init__(self, *, tls: ssl.SSLContext | None = None, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        if tls is not None:  # accept() then hands out TLS sockets, the handshake done
            self._listener = tls.wrap_socket(self._listener, server_side=True)
            self.url = f"pulsar+ssl://localhost:{self.port}"
        self.scripts: dict[int, Answer] = {}
        #: subscription -> acknowledged (ledger, entry)
        self.acked: dict[str, set[tuple[int, int]]] = {}
        self._books: dict[tuple[int, int], _Books] = {}

    def script(self, type_: int, answer: Answer) -> None:
        self.scripts[type_] = answer

    def store_section(self, topic: str, section: bytes, num_messages: int = 1) -> MessageId:
        """Append ``section`` (an entry as sent after the command) unchanged and dispatch it."""
        with self._cond:
            mid = self._append(self._topic(topic), section, num_messages)
            for consumer in [c for c in self._consumers.values() if c.topic.name == topic]:
                self._dispatch(consumer)
        return mid

    def drop_connections(self) -> None:
        """Close every client connection (what a client sees of a broker restart)."""
        with self._cond:
            conns = list(self.connections)
        for conn in conns:
            conn.close()

    def acked_entries(self, subscription: str) -> set[tuple[int, int]]:
        with self._cond:
            return set(self.acked.get(subscription, set()))

    # -- the recorder, extended -------------------------------------------------------------
    def _respond(self, conn: Connection, frame: Frame) -> None:
        answer = self.scripts.get(frame.type)
        if answer is not None and answer(conn, frame):
            return
        c = frame.command
        if frame.type == T.SUBSCRIBE:
            with self._cond:
                self._books[(conn.index, c.subscribe.consumer_id)] = _Books(c.subscribe.subscription)
                self.acked.setdefault(c.subscribe.subscription, set())
        elif frame.type == T.ACK:
            self._on_ack(conn, c.ack)
        elif frame.type == T.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            self._on_redeliver(conn, c.redeliverUnacknowledgedMessages)
        super()._respond(conn, frame)

    def _on_ack(self, conn: Connection, ack: pb.CommandAck) -> None:
        with self._cond:
            books = self._books.get((conn.index, ack.consumer_id))
            consumer = self._consumers.get((conn.index, ack.consumer_id))
            if books is None or consumer is None:
                return
            acked = self.acked[books.subscription]
            for mid in ack.message_id:
                if ack.ack_type == pb.CommandAck.Cumulative:
                    acked.update(
                        (e.message_id.ledger_id, e.message_id.entry_id)
                        for e in consumer.topic.entries
                        if (e.message_id.ledger_id, e.message_id.entry_id) <= (mid.ledgerId, mid.entryId)
                    )
                elif not mid.ack_set:  # a partly acknowledged batch stays
                    acked.add((mid.ledgerId, mid.entryId))
        if ack.HasField("request_id"):
            cmd, sub = new_command(T.ACK_RESPONSE)
            sub.consumer_id = ack.consumer_id
            sub.request_id = ack.request_id
            conn.reply(cmd)

    def _on_redeliver(self, conn: Connection, r: pb.CommandRedeliverUnacknowledgedMessages) -> None:
        with self._cond:
            key = (conn.index, r.consumer_id)
            consumer, books = self._consumers.get(key), self._books.get(key)
            if consumer is None or books is None:
                return
            wanted = {(m.ledgerId, m.entryId) for m in r.message_ids}
            for i, e in enumerate(consumer.topic.entries[: consumer.cursor]):
                if not wanted or (e.message_id.ledger_id, e.message_id.entry_id) in wanted:
                    books.replay.append(i)
            self._dispatch(consumer)

    def _dispatch(self, consumer: _Consumer) -> None:
        # Called with self._cond held. Entries are charged what they declare (see the module docstring).
        books = self._books.get((consumer.conn.index, consumer.consumer_id))
        acked = self.acked.get(books.subscription, set()) if books is not None else set()
        entries = consumer.topic.entries
        while consumer.permits > 0:
            if books is not None and books.replay:
                entry: StoredEntry = entries[books.replay.pop(0)]
            elif consumer.cursor < len(entries):
                entry = entries[consumer.cursor]
                consumer.cursor += 1
            else:
                return
            if (entry.message_id.ledger_id, entry.message_id.entry_id) in acked:
                continue
            charge = entry.num_messages
            consumer.permits = consumer.permits - charge if charge <= 0 else max(0, consumer.permits - charge)
            cmd, msg = new_command(T.MESSAGE)
            msg.consumer_id = consumer.consumer_id
            msg.message_id.CopyFrom(entry.message_id.to_proto())
            consumer.conn.send(encode_with_stored_entry(cmd, entry.section))


# -- answers --------------------------------------------------------------------------------------
def request_id_of(frame: Frame) -> int:
    return int(frame.sub.request_id)


def error_answer(code: int, message: str, *, when: Callable[[Frame], bool] = lambda f: True) -> Answer:
    """Answer a request with ERROR ``code`` (for the frames ``when`` selects)."""

    def answer(conn: Connection, frame: Frame) -> bool:
        if not when(frame):
            return False
        cmd, err = new_command(T.ERROR)
        err.request_id = request_id_of(frame)
        err.error = code  # type: ignore[assignment]
        err.message = message
        conn.reply(cmd)
        return True

    return answer


def lookup_answer(
    *,
    url: str | None = None,
    url_tls: str | None = None,
    redirect: bool = False,
    failed: int | None = None,
    when: Callable[[Frame], bool] = lambda f: True,
) -> Answer:
    """Answer LOOKUP with these broker URLs (Connect, or Redirect), or Failed with ``failed``."""

    def answer(conn: Connection, frame: Frame) -> bool:
        if not when(frame):
            return False
        cmd, r = new_command(T.LOOKUP_RESPONSE)
        r.request_id = request_id_of(frame)
        if failed is not None:
            r.response = pb.CommandLookupTopicResponse.Failed
            r.error = failed  # type: ignore[assignment]
            r.message = "refused by the script"
        else:
            r.response = (
                pb.CommandLookupTopicResponse.Redirect if redirect else pb.CommandLookupTopicResponse.Connect
            )
            r.authoritative = not redirect
            if url is not None:
                r.brokerServiceUrl = url
            if url_tls is not None:
                r.brokerServiceUrlTls = url_tls
        conn.reply(cmd)
        return True

    return answer


def topic_of(frame: Frame) -> str:
    """The topic a PRODUCER / SUBSCRIBE / LOOKUP / PARTITIONED_METADATA names."""
    return str(frame.sub.topic)
