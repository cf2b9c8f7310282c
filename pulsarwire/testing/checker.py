"""The fault-suite checker: what was produced against what arrived.

``Ledger`` records what producers sent (an id per message, in send order per key) and which
sends were confirmed by a receipt; ``check(ledger, arrived)`` compares it with the ids found
in a sink (in the sink's delivery order per key) and returns a :class:`Report` with the
figures every fault scenario must show: produced, acked by receipt, present, duplicates,
missing (acknowledged by a receipt but absent: a real loss), unconfirmed-and-absent (allowed:
the producer was told it failed), and out of order (per key, a later message seen before an
earlier one).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class Ledger:
    """What the producing side did: ids in send order, their keys, and which were confirmed."""

    sent: list[str] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    acked: set[str] = field(default_factory=set)

    def send(self, msg_id: str, key: str = "") -> None:
        self.sent.append(msg_id)
        self.keys[msg_id] = key

    def ack(self, msg_id: str) -> None:
        self.acked.add(msg_id)


@dataclass(frozen=True)
class Report:
    produced: int
    acked: int
    present: int
    duplicates: int
    missing: int
    unconfirmed_absent: int
    out_of_order: int

    @property
    def clean(self) -> bool:
        return self.duplicates == 0 and self.missing == 0 and self.out_of_order == 0

    def line(self) -> str:
        return (
            f"produced={self.produced} acked={self.acked} present={self.present} "
            f"duplicates={self.duplicates} missing={self.missing} "
            f"unconfirmed_absent={self.unconfirmed_absent} out_of_order={self.out_of_order}"
        )


def check(ledger: Ledger, arrived: Iterable[str]) -> Report:
    """Compare the sink's ids (in its order) with the ledger."""
    arrived = list(arrived)
    counts = Counter(arrived)
    known = set(ledger.sent)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    missing = sum(1 for m in ledger.acked if m not in counts)
    unconfirmed_absent = sum(1 for m in ledger.sent if m not in ledger.acked and m not in counts)
    rank = {m: i for i, m in enumerate(ledger.sent)}
    last: dict[str, int] = defaultdict(lambda: -1)
    out_of_order = 0
    seen: set[str] = set()
    for m in arrived:
        if m not in known or m in seen:
            continue
        seen.add(m)
        key = ledger.keys.get(m, "")
        if rank[m] < last[key]:
            out_of_order += 1
        last[key] = max(last[key], rank[m])
    return Report(
        produced=len(ledger.sent),
        acked=len(ledger.acked),
        present=len(seen),
        duplicates=duplicates,
        missing=missing,
        unconfirmed_absent=unconfirmed_absent,
        out_of_order=out_of_order,
    )
