"""Fault injection for tests: make the broker misbehave on purpose, the way real brokers sometimes do.

The broker consults :class:`Faults` on its hot paths (receipts, dispatch);
everything else (dropping connections, CLOSE_PRODUCER/CLOSE_CONSUMER, topic
unloads, restarts) is an action on :class:`pulsarwire.broker.Broker`, see
``Broker.faults_*`` methods. All counters are "the next N" so a test states
exactly which operations are hit.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsarwire.proto import pb


@dataclass
class Faults:
    #: delay the next N send receipts by ``receipt_delay`` seconds
    delay_receipts: int = 0
    receipt_delay: float = 0.0
    #: answer the next N sends with SEND_ERROR ``fail_code`` (nothing is stored)
    fail_receipts: int = 0
    fail_code: int = pb.PersistenceError
    #: flip a payload byte of the next N dispatched entries (the consumer sees a checksum mismatch)
    corrupt_dispatches: int = 0
    #: drop (do not store, do not answer) the next N sends, then close the connection
    drop_sends: int = 0

    def take(self, name: str) -> bool:
        """Consume one unit of the counter ``name``; True when the fault applies now."""
        left: int = getattr(self, name)
        if left > 0:
            setattr(self, name, left - 1)
            return True
        return False


def corrupt(entry_data: bytes) -> bytes:
    """A copy of a stored entry with its last payload byte flipped (checksum no longer matches)."""
    data = bytearray(entry_data)
    data[-1] ^= 0xFF
    return bytes(data)
