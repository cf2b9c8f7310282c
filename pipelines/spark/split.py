"""``minPartitions``: splitting a read's topic-partition ranges into more Spark tasks (no Spark in here).

A read plans one range ``(start, end]`` per topic-partition. When there are fewer ranges than
``minPartitions``, :func:`split_ranges` cuts the large ones into sub-ranges, as Spark's Kafka
source does with offsets: each range gets a share of ``minPartitions`` proportional to its size
(at least one), and :func:`split_range` cuts it into that many pieces of about equal size.

Pulsar has no offsets, but entry ids are contiguous within a ledger (0, 1, 2, ...) and the
driver knows each range's two ends, so within one ledger the size of a range is its number of
entries and a cut is a position ``ledger:entry:-1`` ("up to and including the whole entry"):
no batch is ever split between two tasks and the pieces, exclusive start and inclusive end as
every range, are contiguous — no message is read twice or skipped.

Ledger boundaries are not known on the driver without reading (the binary protocol does not list
a topic's ledgers), so only the part of a range inside its end's ledger is split: a range whose
start lies in an earlier ledger (or is ``EARLIEST``) is cut over the entries ``0 .. end`` of the
end's ledger, and its first piece also holds everything before that ledger. A topic that rolled
over to a new ledger recently is therefore split unevenly, but still read exactly once.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from pipelines.state.positions import Position


def entries(start: Position, end: Position) -> int:
    """How many entries of ``end``'s ledger (start, end] touches: what :func:`split_range` can cut.

    An entry partly taken by ``start`` (a batch index) still counts: the first piece reads the rest
    of it, if any (the driver does not know how many messages the batch holds). 0 for an empty range.
    """
    if not start < end or end.entry_id < 0:
        return 0
    if start.ledger_id == end.ledger_id and start.entry_id >= 0:
        first = start.entry_id + 1 if start.batch_index < 0 else start.entry_id
    else:  # EARLIEST, "everything before ledger L", or an earlier ledger: from the ledger's entry 0
        first = 0
    return max(0, end.entry_id - first + 1)


def split_range(start: Position, end: Position, parts: int) -> list[tuple[Position, Position]]:
    """``(start, end]`` as ``min(parts, entries(start, end))`` contiguous sub-ranges (at least one).

    The cuts are whole entries of ``end``'s ledger, spread evenly over its entries in the range:
    piece ``i`` ends at entry ``first - 1 + (i + 1) * n // k`` (the last at ``end`` itself).
    """
    n = entries(start, end)
    k = min(parts, n)
    if k <= 1:
        return [(start, end)]
    first = end.entry_id - n + 1
    cuts = [Position(end.ledger_id, first - 1 + i * n // k, -1) for i in range(1, k)]
    bounds = [start, *cuts, end]
    return list(itertools.pairwise(bounds))


def split_ranges(
    ranges: Mapping[str, tuple[Position, Position]], min_partitions: int | None
) -> list[tuple[str, Position, Position]]:
    """Each topic-partition's ``(start, end]`` as one or more sub-ranges, together at least
    ``min_partitions`` where the entries allow (Spark's Kafka source's rule, by entry counts).

    Fewer ranges than ``min_partitions``: each gets ``max(1, round(size / total * min_partitions))``
    pieces, its size being :func:`entries`. Otherwise (or without ``min_partitions``) every range
    stays whole. Order: by topic-partition, then by position.
    """
    whole = [(tp, s, e) for tp, (s, e) in ranges.items()]
    if min_partitions is None or len(whole) >= min_partitions:
        return whole
    sizes = {tp: entries(s, e) for tp, s, e in whole}
    total = sum(sizes.values())
    if total == 0:
        return whole
    out: list[tuple[str, Position, Position]] = []
    for tp, s, e in whole:
        parts = max(1, round(sizes[tp] / total * min_partitions))
        out += [(tp, a, b) for a, b in split_range(s, e, parts)]
    return out
