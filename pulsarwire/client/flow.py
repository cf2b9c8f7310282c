"""Flow control of one partition consumer: the FLOW permits it grants and the entries it receives.

A Pulsar consumer asks for messages with FLOW permits, one per message. :class:`PermitBooks` keeps
the books of the current subscription (a resubscribe starts new ones):

* **giving permits back** — every message taken out of the receive queue, and every message
  skipped (before a start position, already acknowledged, corrupt), is *consumed*; once half the
  receiver queue was consumed that many permits are due again in one FLOW (:meth:`~PermitBooks.consume`),
  so permits never leak;
* **checking the broker** — a broker sends an entry only while it holds permits and takes as many
  permits as the entry has messages: even when it sends several batches on the strength of a few
  permits, it never sends more *entries* than it was granted permits in all. It may give permits
  back for messages we asked to be redelivered, at most one per message it sent us, so a
  redelivery request widens the books by that much. An entry whose count is below 1 (corrupt)
  may have cost the broker nothing, or even given it permits (Pulsar's dispatcher takes the count
  as it is): it widens the books by ``1 - declared``, at most a receiver queue, so a poison entry
  never makes an honest broker look like a flood. :meth:`~PermitBooks.entry` answers False for an
  entry beyond the books: the broker is flooding us (the consumer then closes the connection with
  FlowControlError), so the receive queue stays bounded by the permits granted.

Nothing here sends anything: the consumer sends the FLOW commands and tells the books.
"""

from __future__ import annotations


class PermitBooks:
    """Permits granted and entries received on one subscription of one partition consumer."""

    def __init__(self, receiver_queue_size: int) -> None:
        self.receiver_queue_size = receiver_queue_size
        #: FLOW permits sent, plus what redelivery requests may restore
        self.granted = 0
        #: entries the broker sent
        self.entries = 0
        #: messages in those entries
        self.received = 0
        #: permits to give back with the next FLOW
        self.consumed = 0

    def restart(self) -> None:
        """A new subscription (resubscribe): new books, nothing to give back."""
        self.consumed = 0
        self.granted = self.entries = self.received = 0

    def granting(self, permits: int) -> None:
        """A FLOW of ``permits`` was sent."""
        self.granted += permits

    def consume(self, count: int) -> int:
        """``count`` messages left the queue or were skipped; returns the permits to give back now
        (0 until half the receiver queue was consumed)."""
        self.consumed += count
        if self.consumed >= max(self.receiver_queue_size // 2, 1):
            permits, self.consumed = self.consumed, 0
            return permits
        return 0

    def entry(self, declared: int) -> bool:
        """Count one entry that declares ``declared`` messages; False when the broker had no
        permit for it (see the module docstring)."""
        self.entries += 1
        self.received += max(declared, 1)
        if declared < 1:
            self.granted += min(1 - declared, max(self.receiver_queue_size, 1))
        return self.entries <= self.granted

    def redelivery_requested(self) -> None:
        """We asked for a redelivery: the broker may give back a permit per message it sent."""
        self.granted += self.received
