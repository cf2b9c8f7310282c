"""Driver-side planning for the ``pulsarwire`` source (no Spark in here).

* :class:`TopicSelector` — ``topic`` | ``topics`` | ``topicsPattern`` resolved to
  topic-partition names (a partitioned topic expands to its partitions). The source never
  creates a topic: metadata is asked with ``metadata_auto_creation_enabled=false`` and the
  zero-permit consumers subscribe with ``force_topic_creation=false``, so a named topic that
  does not exist is a :class:`~pipelines.errors.MissingTopicError` naming the namespace's
  closest topics (:func:`missing_topic`) — or, for a stream that opted in
  (``waitForTopic``), a topic left out until it is created.
* :class:`Planner` — holds one pulsarwire client on the driver and answers the
  questions a micro-batch needs: which partitions exist now, the last message
  of each (GET_LAST_MESSAGE_ID), the position just before the first message
  published at or after a time, and how far to read so that a batch respects
  ``maxMessagesPerTrigger`` / ``maxBytesPerTrigger`` (:meth:`Planner.advance`).
  A question about every partition (their consumers' lookups and subscriptions, the
  last messages, the backlog, a release) is asked of all partitions at once, from a
  few threads sharing the one client (:class:`~pipelines.parallel.ParallelCalls`):
  planning a trigger takes about one round trip to the broker per question, not one
  per partition.
* The backlog-holding subscription: with a ``subscriptionName`` the planner keeps
  a durable, zero-permit consumer per topic-partition. It never receives
  messages; it answers GET_LAST_MESSAGE_ID and the backlog count, and it is
  acknowledged cumulatively (:meth:`Planner.release`) only up to positions the
  caller says are committed downstream. A position in the middle of a batch
  releases only the entries before it.

Pulsar has no message offsets: counting messages between two positions means
reading them. So limits are enforced by scanning forward on the driver (message
ids and value sizes only are kept), once per batch and only as far as the limit;
without limits nothing is scanned. ``pyarrow.compute`` is imported by a scan that counts
bytes (``maxBytesPerTrigger``) only: the source's driver process imports this module when
every streaming query starts.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import uuid
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.errors import CorruptMessageError, MissingTopicError, OptionError, PipelinesError
from pipelines.options.bound import Bound
from pipelines.options.client import ClientSettings
from pipelines.options.grammar import Spec, duration_ms
from pipelines.options.source import SourceOptions
from pipelines.parallel import ParallelCalls
from pipelines.state.positions import Offsets, Position, partition_of
from pipelines.suggest import closest
from pulsarwire import (
    ConsumerType,
    InitialPosition,
    InvalidTopicName,
    MessageId,
    OperationTimeoutError,
    PulsarWireError,
    TopicName,
    TopicNotFound,
)
from pulsarwire import CorruptMessageError as CorruptEntry

log = logging.getLogger("pipelines.spark.reader")

#: most requests a planner has in flight at once (threads of its pool)
MAX_CONCURRENT_REQUESTS = 8


def full_topic_name(topic: str) -> str:
    """``x`` → ``persistent://public/default/x``; ``t/n/x`` → ``persistent://t/n/x``.

    :class:`pulsarwire.TopicName`'s rule, on the option's text without surrounding spaces;
    raises OptionError (naming ``topic``) for a name Pulsar refuses.
    """
    try:
        return str(TopicName.parse(topic.strip()))
    except InvalidTopicName as exc:
        raise OptionError("topic", str(exc)) from None


@dataclass(frozen=True)
class TopicSelector:
    """Exactly one of ``topic``, ``topics`` (comma list) and ``topicsPattern``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None

    @classmethod
    def of(cls, topic: str | None, topics: list[str] | None, pattern: str | None) -> TopicSelector:
        """The selector of validated source options (exactly one of the three is set)."""
        if pattern is not None:
            return cls(pattern=full_topic_name(pattern))
        names = [topic] if topic is not None else topics or []
        return cls(topics=tuple(full_topic_name(t) for t in names))

    def namespace(self) -> str:
        assert self.pattern is not None
        return TopicName.parse(self.pattern).namespace_name

    def resolve(self, client: Any) -> list[str]:
        """Every topic-partition selected now, sorted (without creating any topic).

        A named topic the broker does not know raises MissingTopicError; one it answers
        "0 partitions" for is listed as is (:meth:`Planner.partitions` checks that it exists).
        """
        found: set[str] = set()
        if self.pattern is not None:
            found.update(client.get_topics_of_namespace(self.namespace(), self.pattern))
        for t in self.topics:
            try:
                found.update(client.get_topic_partitions(t, create=False))
            except TopicNotFound:
                raise missing_topic(client, t) from None
        return sorted(found)


def missing_topic(client: Any, topic: str) -> MissingTopicError:
    """The error for ``topic`` not existing, with the namespace's closest existing topics.

    The namespace is listed (GET_TOPICS_OF_NAMESPACE) for the suggestions only: when the role
    may not list it, the error just names the topic.
    """
    name = TopicName.parse(topic)
    namespace = name.namespace_name
    try:
        names = client.get_topics_of_namespace(namespace)
    except PulsarWireError as exc:
        log.debug("listing %s for suggestions failed: %s", namespace, exc)
        return MissingTopicError(topic, namespace, (), listed=False)
    parents = {TopicName.parse(n).partitioned_topic for n in names} - {name}
    near = closest(name.local_name, sorted(p.local_name for p in parents), n=3, cutoff=0.5)
    return MissingTopicError(topic, namespace, tuple(near))


class PlanCancelled(PipelinesError):
    """A plan made in the background was abandoned before it finished (the query stopped)."""


@dataclass(frozen=True)
class Scan:
    """How far a partition was scanned: the last position taken and what it held."""

    position: Position
    rows: int
    bytes: int
    more: bool  # rows remained before the partition's end


def _position_at(batch: Any, i: int) -> Position:
    """The position after taking row ``i`` of a bulk RecordBatch.

    A batch index becomes -1 (the whole entry) when the next row is in another entry, i.e.
    the batch is complete; at the last row of a RecordBatch that is not known, so the
    batch index stays (a position inside a batch is exact, just not the shortest form).
    """
    ledger = batch.column("ledger_id")[i].as_py()
    entry = batch.column("entry_id")[i].as_py()
    b = batch.column("batch_index")[i].as_py()
    if b >= 0 and i + 1 < batch.num_rows:
        following = (batch.column("ledger_id")[i + 1].as_py(), batch.column("entry_id")[i + 1].as_py())
        if following != (ledger, entry):
            b = -1
    return Position(ledger, entry, b)


class Planner:
    """Planning state of one query on the driver; close() it when the query stops."""

    def __init__(
        self,
        settings: ClientSettings,
        selector: TopicSelector,
        *,
        subscription: str | None = None,
        poll_timeout_ms: int = 30_000,
        on_corrupt: str = "raise",
        wait_for_topics: bool = False,
    ) -> None:
        self.settings = settings
        self.selector = selector
        self.subscription = subscription
        self.poll_timeout_ms = poll_timeout_ms
        #: what a scan makes of a corrupt entry (``read_arrow``'s on_corrupt: a row counts like any)
        self.on_corrupt = on_corrupt
        self.wait_for_topics = wait_for_topics
        self._client: Any = None
        #: per-partition requests at once
        self._calls = ParallelCalls(MAX_CONCURRENT_REQUESTS, "pipelines-plan")
        self._watchers: dict[str, Any] = {}  # topic-partition -> zero-permit consumer
        self._waiting: set[str] = set()  # named topics that do not exist yet (wait_for_topics)

    # -- plumbing -------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.settings.client()
        return self._client

    def close(self) -> None:
        self._calls.close()
        for c in self._watchers.values():
            try:
                c.close()
            except Exception as exc:  # closing is best effort; the broker drops them with the connection
                log.debug("closing %s: %s", c.topic(), exc)
        self._watchers.clear()
        if self._client is not None:
            self._client.close()
            self._client = None

    def _watch(self, partitions: Iterable[str]) -> None:
        """Subscribe the zero-permit consumers ``partitions`` lack, all at once: each answers
        GET_LAST_MESSAGE_ID for its partition (and holds its backlog if durable)."""
        missing = [tp for tp in dict.fromkeys(partitions) if tp not in self._watchers]

        def watch(tp: str) -> None:  # kept as soon as subscribed, so close() closes it whatever fails
            self._watchers[tp] = self._subscribe(tp)

        self._calls.each(watch, missing)

    def _subscribe(self, tp: str) -> Any:
        durable = self.subscription is not None
        return self.client.subscribe(
            tp,
            self.subscription or f"pipelines-plan-{uuid.uuid4().hex[:12]}",
            consumer_type=ConsumerType.Failover,
            initial_position=InitialPosition.Earliest,
            receiver_queue_size=0,
            durable=durable,
            ack_group_time_ms=0,  # a release is sent at once: lag figures follow it
            # never create a topic by reading it (a partition exists with its partitioned topic)
            force_topic_creation=partition_of(tp) >= 0,
        )

    # -- questions ------------------------------------------------------------------
    def partitions(self) -> list[str]:
        """Every topic-partition selected now, sorted; no topic is created by asking.

        A named topic that does not exist raises MissingTopicError, or with
        ``wait_for_topics`` is left out (and logged once) until it exists.
        """
        found: set[str] = set()
        if self.selector.pattern is not None:
            found.update(
                self.client.get_topics_of_namespace(self.selector.namespace(), self.selector.pattern)
            )
        for t in self.selector.topics:
            try:
                parts = TopicSelector(topics=(t,)).resolve(self.client)
                if parts == [t]:  # not partitioned, or missing on a broker that answers 0 for it
                    self._watch(parts)
            except (MissingTopicError, TopicNotFound) as exc:
                if not self.wait_for_topics:
                    if isinstance(exc, MissingTopicError):
                        raise
                    raise missing_topic(self.client, t) from None
                if t not in self._waiting:
                    log.warning("topic %s does not exist yet: waiting for it to be created", t)
                    self._waiting.add(t)
                continue
            if t in self._waiting:
                log.info("topic %s exists now", t)
                self._waiting.discard(t)
            found.update(parts)
        return sorted(found)

    def latest(self, partitions: Iterable[str]) -> Offsets:
        """The position of the last message of each partition (EARLIEST when it is empty)."""
        parts = list(partitions)
        self._watch(parts)
        return Offsets(dict(zip(parts, self._calls.each(self._last, parts), strict=True)))

    def _last(self, tp: str) -> Position:
        pos = Position.of(self._watchers[tp].get_last_message_id())
        if pos.batch_index >= 0:  # the last message of the last entry: that whole entry
            pos = Position(pos.ledger_id, pos.entry_id, -1)
        return pos

    def backlog(self) -> dict[str, int]:
        """Messages not yet released per partition (needs the durable subscription)."""
        if self.subscription is None:
            return {}
        watched = list(self._watchers.items())
        counts = self._calls.each(lambda w: sum(w.get_backlog().values()), [w for _, w in watched])
        return {tp: n for (tp, _), n in zip(watched, counts, strict=True)}

    def release(self, offsets: Offsets) -> None:
        """Acknowledge the durable subscription cumulatively up to ``offsets`` (committed positions).

        A position inside a batch releases only the entries before that batch's entry, so
        nothing that is not committed is ever released.
        """
        if self.subscription is None:
            return
        targets: dict[str, MessageId] = {}
        for tp, pos in offsets.items():
            entry = released_entry(pos)
            if entry is not None:
                targets[tp] = MessageId(entry.ledger_id, entry.entry_id, partition_of(tp))
        self._watch(targets)

        def ack(tp: str) -> None:
            watcher = self._watchers[tp]
            watcher.acknowledge_cumulative(targets[tp])
            # An ack has no answer; a request after it on the same connection is answered once
            # the broker has handled it, so backlog figures read from now on include the release.
            watcher.get_backlog()

        self._calls.each(ack, targets)

    def rewind(self, offsets: Offsets) -> None:
        """Move the durable subscription of each partition of ``offsets`` so that it is acknowledged
        exactly up to its position, back too: a seek to the earliest message, then a release."""
        if self.subscription is None:
            raise PipelinesError("rewinding needs the durable subscription")
        parts = list(offsets)
        self._watch(parts)
        self._calls.each(lambda tp: self._watchers[tp].seek(MessageId.EARLIEST), parts)
        self.release(offsets)

    def acknowledged(self, partitions: Iterable[str]) -> dict[str, Position | None]:
        """The durable subscription's mark-delete position per partition (a whole entry: every
        message up to it is acknowledged); None where the broker does not report it.

        Subscribing creates the subscription where it is missing, at the earliest message and
        with nothing acknowledged, as the job's first run does.
        """
        if self.subscription is None:
            raise PipelinesError("acknowledged positions need the durable subscription")
        parts = list(partitions)
        self._watch(parts)

        def ask(tp: str) -> Position | None:
            found = self._watchers[tp].get_mark_delete_positions().get(tp)
            return None if found is None else Position(found.ledger_id, found.entry_id, -1)

        return dict(zip(parts, self._calls.each(ask, parts), strict=True))

    def position_before_time(self, tp: str, time_ms: int) -> Position | None:
        """The position just before the first message of ``tp`` published at or after ``time_ms``.

        None when no such message exists yet.
        """
        reader = self.client.create_reader(tp, MessageId.EARLIEST, receiver_queue_size=1)
        try:
            reader.seek(time_ms)
            if not reader.has_message_available():
                return None
            try:
                msg = reader.read_next(timeout_millis=self.poll_timeout_ms)
            except OperationTimeoutError:
                return None
            mid = msg.message_id()
        finally:
            reader.close()
        if mid.batch_index > 0:
            return Position(mid.ledger_id, mid.entry_id, mid.batch_index - 1)
        return Position(mid.ledger_id, mid.entry_id - 1, -1)

    def scan(
        self,
        tp: str,
        start: Position,
        end: Position,
        max_rows: int | None,
        max_bytes: int | None,
        at_least_one: bool = True,
        *,
        stop: threading.Event | None = None,
    ) -> Scan:
        """Read ids and sizes after ``start`` until a limit is reached or ``end``.

        With ``at_least_one`` a message bigger than ``max_bytes`` still goes (or a stream
        would stall on it). ``more`` tells whether rows remain between the returned position
        and ``end``. Each RecordBatch is cut with Arrow kernels: no Python work per message.
        Raises :class:`PlanCancelled` once ``stop`` is set, CorruptMessageError for a corrupt
        entry when the planner's ``on_corrupt`` is ``raise``.
        """

        if not start < end:
            return Scan(start, 0, 0, False)
        rows = nbytes = 0
        position = start
        batches = self._read(tp, start, end, min(max_rows or 10_000, 10_000))
        try:
            for batch in batches:
                if stop is not None and stop.is_set():
                    raise PlanCancelled(f"{tp}: planning stopped")
                n = batch.num_rows
                take = n if max_rows is None else max(0, min(n, max_rows - rows))
                sizes = None
                if max_bytes is not None and n:
                    import pyarrow.compute as pc  # maxBytesPerTrigger only (see the module docstring)

                    sizes = pc.cumulative_sum(pc.binary_length(batch.column("value")).cast("int64"))
                    # messages whose running total stays within the budget (the sums never decrease)
                    fit = pc.sum(pc.less_equal(sizes, max_bytes - nbytes).cast("int64")).as_py() or 0
                    take = min(take, fit)
                if take == 0 and at_least_one and rows == 0 and n:
                    take = 1
                if take:
                    rows += take
                    nbytes += sizes[take - 1].as_py() if sizes is not None else 0
                    position = _position_at(batch, take - 1)
                if take < n:
                    return Scan(position, rows, nbytes, True)
        except CorruptEntry as exc:  # onCorruptMessage=fail: the driver meets it first
            raise CorruptMessageError(tp, str(exc.message_id), exc.reason) from exc
        finally:
            batches.close()  # the reader stops at once, also when a limit cut the range short
        return Scan(end, rows, nbytes, False)  # read through: everything up to ``end`` is taken

    def _read(self, tp: str, start: Position, end: Position, batch_rows: int) -> Generator[Any, None, None]:
        """The bulk RecordBatches of ``(start, end]`` (close the generator to stop the reader)."""
        p = partition_of(tp)
        batches: Generator[Any, None, None] = self.client.read_arrow(
            tp,
            start.message_id(p),
            end.message_id(p),
            partition=p,
            batch_rows=batch_rows,
            idle_timeout=self.poll_timeout_ms / 1000,
            on_corrupt=self.on_corrupt,
        )
        return batches

    def advance(
        self,
        start: Offsets,
        latest: Offsets,
        max_rows: int | None,
        max_bytes: int | None,
        *,
        stop: threading.Event | None = None,
    ) -> tuple[Offsets, int]:
        """End positions for one batch from ``start`` toward ``latest`` within the limits.

        The row budget is shared fairly: each partition with data gets an equal share first,
        then what others left unused. Returns the end offsets and the rows admitted.
        Raises :class:`PlanCancelled` once ``stop`` is set (checked between RecordBatches).
        """
        if max_rows is None and max_bytes is None:
            return latest, -1
        pos = {tp: start.get(tp, Position.EARLIEST) for tp in latest}
        active = [tp for tp in latest if pos[tp] < latest[tp]]
        rows_left = max_rows
        bytes_left = max_bytes
        total = 0
        first_round = True
        while active and (rows_left is None or rows_left > 0) and (bytes_left is None or bytes_left > 0):
            n = len(active)
            row_share = None if rows_left is None else max(1, -(-rows_left // n))
            byte_share = None if bytes_left is None else max(1, -(-bytes_left // n))
            still: list[str] = []
            for tp in active:
                if rows_left is not None and rows_left <= 0:
                    break
                if bytes_left is not None and bytes_left <= 0:
                    break
                rs = None if row_share is None else min(row_share, rows_left or 0)
                bs = None if byte_share is None else min(byte_share, bytes_left or 0)
                s = self.scan(tp, pos[tp], latest[tp], rs, bs, at_least_one=first_round, stop=stop)
                pos[tp] = s.position
                total += s.rows
                if rows_left is not None:
                    rows_left -= s.rows
                if bytes_left is not None:
                    bytes_left -= s.bytes
                if s.more and s.rows:
                    still.append(tp)
            first_round = False
            active = still
        return Offsets(pos), total


# -- a query's source options, resolved on the driver -------------------------------------
def _bound(offsets: str | dict[str, str] | None, time: int | None, default: str) -> Bound:
    """startingOffsets/startingTime (or ending*) as one :class:`Bound` (resolved on the driver)."""
    if time is not None:
        return Bound.model_construct(kind="time", time_ms=time)
    spec = default if offsets is None else offsets
    if isinstance(spec, str):
        return Bound.model_validate(spec)
    return Bound.model_construct(kind="offsets", offsets=dict(spec))


@dataclass(frozen=True)
class SourceSettings:
    """The validated options of one query as the driver and the executors use them."""

    settings: ClientSettings
    selector: TopicSelector
    starting: Bound
    ending: Bound
    max_rows: int | None
    max_bytes: int | None
    min_rows: int | None
    max_trigger_delay_ms: int
    fail_on_data_loss: bool
    subscription: str | None
    poll_timeout_ms: int
    include_properties: bool
    receiver_queue_size: int
    offset_store: str | None
    job: str | None
    schema_mode: str = "raw"
    on_corrupt: str = "fail"
    wait_for_topic: bool = False
    min_partitions: int | None = None

    @property
    def scan_on_corrupt(self) -> str:
        """What the driver's scans (admission control) make of a corrupt entry: with ``fail`` the
        scan fails too, otherwise it counts as one row (the executors skip or quarantine it)."""
        return "raise" if self.on_corrupt == "fail" else "rows"

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> SourceSettings:
        """Validate ``options`` (:class:`~pipelines.options.source.SourceOptions`). Raises OptionError."""
        o = SourceOptions.from_spark(options, streaming=streaming)
        selector = TopicSelector.of(o.topic, o.topics, o.topics_pattern)
        subscription = o.subscription
        if streaming and not subscription:
            digest = hashlib.sha1(repr((selector, o.job)).encode()).hexdigest()[:12]
            subscription = f"pipelines-{digest}"
        return cls(
            settings=o.client_settings(),
            selector=selector,
            starting=_bound(o.starting_offsets, o.starting_time, "latest" if streaming else "earliest"),
            ending=_bound(o.ending_offsets, o.ending_time, "latest"),
            max_rows=o.max_messages_per_trigger,
            max_bytes=o.max_bytes_per_trigger,
            min_rows=o.min_messages_per_trigger,
            max_trigger_delay_ms=duration_ms(o.max_trigger_delay),
            fail_on_data_loss=o.fail_on_data_loss,
            subscription=subscription if streaming else None,
            poll_timeout_ms=o.poll_timeout_ms,
            include_properties=o.include_properties,
            receiver_queue_size=o.receiver_queue_size,
            offset_store=o.offset_store,
            job=o.job,
            schema_mode=o.schema_,
            on_corrupt=o.on_corrupt_message,
            wait_for_topic=o.wait_for_topic,
            min_partitions=o.min_partitions,
        )


def released_entry(pos: Position) -> Position | None:
    """The last whole entry taken by ``pos``: what :meth:`Planner.release` acknowledges the durable
    subscription up to (None when ``pos`` takes no whole entry). A position inside a batch takes
    only the entries before that batch's entry."""
    if pos.is_earliest or pos.entry_id < 0:
        return None
    if pos.batch_index < 0:
        return Position(pos.ledger_id, pos.entry_id, -1)
    return Position(pos.ledger_id, pos.entry_id - 1, -1) if pos.entry_id > 0 else None


# -- resolving bounds on the driver ----------------------------------------------------------
def resolve_start(planner: Planner, bound: Bound, partitions: list[str], latest: Offsets) -> Offsets:
    """Exclusive start positions for ``partitions`` (a JSON bound must name every one)."""
    if bound.kind == "earliest":
        return Offsets({tp: Position.EARLIEST for tp in partitions})
    if bound.kind == "latest":
        return Offsets({tp: latest[tp] for tp in partitions})
    if bound.kind == "time":
        assert bound.time_ms is not None
        out = {}
        for tp in partitions:
            pos = planner.position_before_time(tp, bound.time_ms)
            out[tp] = latest[tp] if pos is None else pos
        return Offsets(out)
    given = bound.positions()
    missing = [tp for tp in partitions if tp not in given]
    if missing:
        raise OptionError("startingOffsets", f"no position for {', '.join(missing)}")
    return Offsets({tp: _spec(given[tp], latest[tp]) for tp in partitions})


def resolve_end(planner: Planner, bound: Bound, partitions: list[str], latest: Offsets) -> Offsets:
    """Inclusive end positions (never past the last message)."""
    if bound.kind == "latest":
        return latest
    if bound.kind == "time":
        assert bound.time_ms is not None
        out = {}
        for tp in partitions:
            pos = planner.position_before_time(tp, bound.time_ms)
            out[tp] = latest[tp] if pos is None else min(pos, latest[tp])
        return Offsets(out)
    given = bound.positions()
    missing = [tp for tp in partitions if tp not in given]
    if missing:
        raise OptionError("endingOffsets", f"no position for {', '.join(missing)}")
    return Offsets({tp: min(_spec(given[tp], latest[tp]), latest[tp]) for tp in partitions})


def bounds(opts: SourceSettings, *, ends_only: bool = False) -> tuple[Offsets, Offsets]:
    """(start, end) of a bounded read of every selected topic-partition, resolved now.

    With ``ends_only`` the start is left empty (no seek by time is spent on it).
    """
    planner = Planner(
        opts.settings, opts.selector, poll_timeout_ms=opts.poll_timeout_ms, on_corrupt=opts.scan_on_corrupt
    )
    try:
        parts = planner.partitions()
        latest = planner.latest(parts)
        start = Offsets() if ends_only else resolve_start(planner, opts.starting, parts, latest)
        return start, resolve_end(planner, opts.ending, parts, latest)
    finally:
        planner.close()


def _spec(spec: Spec, latest: Position) -> Position:
    if spec == "earliest":
        return Position.EARLIEST
    if spec == "latest":
        return latest
    assert isinstance(spec, Position)
    return spec


# -- the stream's backlog ------------------------------------------------------------------
@dataclass
class Lag:
    """Messages not yet committed per topic-partition after a batch is planned."""

    per_partition: dict[str, int]

    @property
    def summary(self) -> tuple[int, float, int]:
        v = list(self.per_partition.values()) or [0]
        return min(v), sum(v) / len(v), max(v)


def lag_planner(options: Mapping[str, str]) -> Planner:
    """A planner on the stream's durable subscription, for :func:`subscription_lag` (close it)."""
    opts = SourceSettings.parse(options, streaming=True)
    return Planner(opts.settings, opts.selector, subscription=opts.subscription)


def subscription_lag(options: Mapping[str, str], planner: Planner | None = None) -> Lag:
    """Messages not yet committed per topic-partition, from the stream's durable subscription.

    ``options`` are the stream's source options; a runner calls this between batches to show
    how far behind a job is (the broker counts the backlog; nothing is read). A runner asking
    after every batch passes one :func:`lag_planner` instead of connecting each time.
    """
    own = planner is None
    planner = planner or lag_planner(options)
    try:
        planner.latest(planner.partitions())  # attaches a zero-permit consumer per new partition
        return Lag(planner.backlog())
    finally:
        if own:
            planner.close()
