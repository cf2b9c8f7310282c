"""Negative acks and the ack timeout of one partition consumer: entries due for redelivery.

:class:`RedeliveryTimers` keeps two books keyed by entry (ledger_id, entry_id), each with the
monotonic time at which the entry is due: ``nacks`` — negatively acknowledged entries (and
chunks of a chunked message given up), due after ``negative_ack_redelivery_delay_ms`` — and
``unacked`` — entries handed out while an ack timeout (``unacked_messages_timeout_ms``) is set,
due when not acknowledged in time. The consumer's timer task asks for what is :meth:`~RedeliveryTimers.due`
every few milliseconds and asks the broker to redeliver it; an ack takes an entry out of both
books, a cumulative ack every handed-out entry up to it, and a seek clears them. Times are passed
in by the caller: nothing here reads a clock.
"""

from __future__ import annotations

#: an entry's (ledger_id, entry_id)
Entry = tuple[int, int]


class RedeliveryTimers:
    """Entries of one consumer that the broker will be asked to redeliver at a given time."""

    def __init__(self) -> None:
        #: negatively acknowledged entry -> when it is redelivered
        self.nacks: dict[Entry, float] = {}
        #: entry handed out under an ack timeout -> when it is redelivered unless acknowledged
        self.unacked: dict[Entry, float] = {}

    def nack(self, entry: Entry, due: float) -> None:
        self.nacks[entry] = due

    def handed_out(self, entry: Entry, due: float) -> None:
        """``entry`` was handed out: redelivered at ``due`` unless acknowledged before (ack timeout)."""
        self.unacked[entry] = due

    def acked(self, entry: Entry) -> None:
        """``entry`` is acknowledged: neither book redelivers it."""
        self.nacks.pop(entry, None)
        self.unacked.pop(entry, None)

    def acked_up_to(self, entry: Entry) -> None:
        """A cumulative ack up to ``entry``: the ack timeout of every entry up to it ends."""
        for key in [k for k in self.unacked if k <= entry]:
            del self.unacked[key]

    def due(self, now: float) -> list[Entry]:
        """Entries due at ``now`` (negative acks first); they stay in the books until :meth:`acked`."""
        due = [k for k, t in self.nacks.items() if t <= now]
        due += [k for k, t in self.unacked.items() if t <= now and k not in due]
        return due

    def clear(self) -> None:
        self.nacks.clear()
        self.unacked.clear()
