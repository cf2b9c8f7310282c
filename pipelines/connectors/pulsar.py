"""The Pulsar connector: ``source.pulsar`` (a stream, and ranges for backfills) and ``sink.pulsar``.

The source is the ``pulsarwire`` Spark data source (:mod:`pipelines.spark`); what the runner
asks of it outside Spark goes through one :class:`~pipelines.spark.planner.Planner` per
question on the driver (no JVM):

* **preflight** — the service URL answers Pulsar's handshake within :data:`PROBE_SECONDS` (a
  refused connection is tried again for :data:`REFUSED_SECONDS`: a broker that is starting);
  the named topics exist (the source never creates one; skipped with ``wait_for_topic``); and for
  ``run`` the positions the job resumes from still mean what they meant: not past the end of
  their topic-partition, and not ahead of what the job's durable subscription has acknowledged
  (the subscription is acknowledged before a position is stored, so a subscription behind the
  positions was created again: the broker lost its data or the topic was recreated). With
  ``fail_on_data_loss: true`` that is an error saying how to reset; with ``false`` a warning, and
  those partitions are read again from their earliest message.
* **release** — after the sink's commit, the durable subscription is acknowledged cumulatively
  up to the batch's end (a failed acknowledgement fails the batch); ``offsets reset`` rewinds it.
* **undecodable messages** — with ``on_corrupt_message: skip`` or ``quarantine`` the source is read
  with ``onCorruptMessage=quarantine`` and each batch is split before the transform
  (:mod:`pipelines.spark.quarantine`).
* **lag** — the messages the broker counts on the durable subscription after a batch, less those of
  a batched entry the batch ended inside.

The sink writes each batch with broker deduplication (:func:`pipelines.spark.sink.write_pulsar_exactly_once`);
in a stream its producer names carry the query id, so a new checkpoint never collides with the
sequence ids of the old one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pipelines.connectors.base import Batch, Checked, JobContext, Opened, PlainSink, Resume
from pipelines.errors import (
    JobError,
    MissingTopicError,
    OffsetsAheadError,
    OptionError,
    PipelinesError,
    SinkError,
    SubscriptionLostError,
)
from pipelines.masking import mask
from pipelines.options.bound import Bound
from pipelines.options.client import ClientSettings, client_settings
from pipelines.spark.planner import (
    Planner,
    SourceSettings,
    TopicSelector,
    bounds,
    released_entry,
    resolve_start,
    subscription_lag,
)
from pipelines.state.positions import Offsets, Position
from pulsarwire import (
    AuthenticationError,
    AuthorizationError,
    LocalCredentialsError,
    NotPulsarError,
    NotTlsError,
    PulsarWireError,
    RemoteProtocolError,
)

if TYPE_CHECKING:
    from pipelines.jobs.models import PulsarSink, PulsarSource

__all__ = ["PROBE_SECONDS", "PulsarSinkConnector", "PulsarSourceConnector", "connect_failure", "probe"]

log = logging.getLogger("pipelines.connectors.pulsar")

#: how long a service URL has to answer the Pulsar handshake
PROBE_SECONDS = 5.0
#: how long a refused connection is tried again (a broker that is starting)
REFUSED_SECONDS = 3.0
#: ``offsets show`` counts a backlog by reading message ids up to this many per partition
BACKLOG_SCAN_LIMIT = 1_000_000
#: the columns that identify a message's position (a backfill merges on them)
POSITION_COLUMNS = ("topic", "partition", "ledgerId", "entryId", "batchIndex")


def warn(text: str) -> None:
    print(f"warning: {mask(text)}", file=sys.stderr, flush=True)


# -- reaching the service URL ----------------------------------------------------------------
def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def connect_failure(exc: BaseException, timeout: float = PROBE_SECONDS) -> str:
    """A short cause for a failed connection: connection refused, name not resolved, ..."""
    for e in _chain(exc):
        if isinstance(e, NotTlsError | NotPulsarError):
            return e.reason
        if isinstance(e, LocalCredentialsError):  # made on this side: the broker was not asked
            return e.server_message or str(e)
        if isinstance(e, socket.gaierror):
            if e.errno in (getattr(socket, "EAI_NONAME", None), getattr(socket, "EAI_NODATA", None)):
                return "name not resolved (no such host)"
            return f"name resolution failed ({e.strerror or e})"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused (nothing listens there: is the broker running?)"
        if isinstance(e, RemoteProtocolError):
            return (
                "this port does not speak the Pulsar protocol (an HTTP or admin port? "
                "Pulsar's binary protocol listens on 6650, 6651 with TLS)"
            )
        if isinstance(e, ssl.SSLCertVerificationError):
            return f"the broker's TLS certificate is not trusted ({e.verify_message or e})"
        if isinstance(e, ssl.SSLError):
            return f"TLS handshake failed ({e.reason or e})"
        if isinstance(e, AuthenticationError | AuthorizationError):
            return f"the broker refused the credentials ({e})"
        if isinstance(e, TimeoutError):
            return f"no answer within {timeout:g} s (host down or firewalled, or not a Pulsar port)"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
    text = str(exc)
    return text.split(": ", 1)[1] if text.startswith("cannot connect to ") and ": " in text else text


def _retriable(exc: BaseException) -> bool:
    return any(isinstance(e, ConnectionRefusedError) for e in _chain(exc))


def probe(settings: ClientSettings, timeout: float = PROBE_SECONDS) -> str | None:
    """Connect to ``settings.service_url`` once; None when it answered, else the cause.

    A refused connection is tried again for :data:`REFUSED_SECONDS`; nothing else is.
    """
    quick = dataclasses.replace(
        settings,
        options={
            **settings.options,
            "connection_timeout_seconds": timeout,
            "operation_timeout_seconds": timeout,
        },
    )
    deadline = time.monotonic() + REFUSED_SECONDS
    delay = 0.2
    while True:
        try:
            client = quick.client()
        except (PulsarWireError, OSError, ValueError) as exc:
            return connect_failure(exc, timeout)
        try:
            client.check_connection(timeout)
            return None
        except (PulsarWireError, OSError) as exc:
            if not (_retriable(exc) and time.monotonic() + delay < deadline):
                return connect_failure(exc, timeout)
        finally:
            client.close()
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _reach(ctx: JobContext, key: str, options: dict[str, str]) -> list[str]:
    """The line of a service URL that does not answer the handshake (asked once per URL and job)."""
    settings = client_settings(options)
    url = settings.service_url
    if url not in ctx.memo:
        ctx.memo[url] = probe(settings)
    reason = ctx.memo[url]
    if reason is None:
        return []
    origin = ctx.origin(key)
    came = f" ({key} ← {origin})" if origin else ""
    return [ctx.line(key, f"cannot reach {url}{came}: {reason}")]


# -- the source --------------------------------------------------------------------------------
class PulsarSourceConnector(Opened):
    """``source.pulsar`` (:mod:`pipelines.connectors.base`: StreamSource and BoundedSource)."""

    key = "source.pulsar"
    position_columns = POSITION_COLUMNS
    section: PulsarSource

    def __init__(self, section: PulsarSource, ctx: JobContext) -> None:
        super().__init__(section, ctx)
        self.subscription = section.subscription_of(ctx.name)
        self.options = section.stream_options(ctx.name)
        self.corrupt_word = "quarantined" if section.on_corrupt_message == "quarantine" else "skipped"
        self._durable: Planner | None = None  # releases and lag: one connection for the run
        self._lock = threading.Lock()

    # -- plumbing
    def _planner(self, *, durable: bool = False) -> Planner:
        """A planner on the job's topics; ``durable``: on the stream's own durable subscription."""
        s = self.section
        selector = TopicSelector.of(s.topic, s.topics, s.topics_pattern)
        return Planner(
            client_settings(self.options), selector, subscription=self.subscription if durable else None
        )

    def _held(self) -> Planner:
        with self._lock:
            if self._durable is None:
                self._durable = self._planner(durable=True)
            return self._durable

    def close(self) -> None:
        with self._lock:
            if self._durable is not None:
                self._durable.close()
                self._durable = None

    # -- before Spark
    def reach(self) -> list[str]:
        return _reach(self.ctx, f"{self.key}.service_url", self.options)

    def _topic_key(self) -> str:
        s = self.section
        return f"{self.key}." + ("topic" if s.topic else "topics" if s.topics else "topics_pattern")

    def preflight(self, command: str, resume: Resume, acked: Resume) -> Checked:
        """Topics exist; (``run``) the resume positions still mean what they meant."""
        if self.section.wait_for_topic or command not in ("run", "backfill"):
            return Checked([], Offsets({}))
        try:
            planner = self._planner()
            try:
                try:
                    parts = planner.partitions()
                except MissingTopicError as exc:
                    return Checked([self.ctx.line(self._topic_key(), str(exc))], Offsets({}))
                if command != "run":
                    return Checked([], Offsets({}))
                lost = self._lost(planner, parts, resume, acked)
            finally:
                planner.close()
        except (PulsarWireError, OptionError) as exc:
            raise JobError(self.ctx.line(self.key, str(exc))) from None
        return self._lost_checked(lost, resume[1])

    def _lost(self, planner: Planner, parts: list[str], resume: Resume, acked_at: Resume) -> dict[str, str]:
        """topic-partition → why the position the job resumes from no longer means what it meant."""
        start, where = resume
        if start is None:
            return {}
        found: dict[str, str] = {}
        latest = planner.latest(parts)
        kind = "checkpointed" if where == "checkpoint" else "stored"
        for tp, pos in start.items():
            if tp in latest and pos > latest[tp]:
                found[tp] = str(OffsetsAheadError(tp, str(pos), str(latest[tp]), kind))
        acked, acked_where = acked_at  # the checkpoint's last committed batch, or the store's
        if acked is None:
            return found
        # the job has subscribed before, so asking subscribes nothing new unless it was lost
        durable = self._planner(durable=True)
        try:
            marks = durable.acknowledged([tp for tp in acked if tp in latest and tp not in found])
        finally:
            durable.close()
        for tp, mark in marks.items():
            owed = released_entry(acked[tp])
            if mark is not None and owed is not None and mark < owed:
                found[tp] = str(
                    SubscriptionLostError(
                        tp,
                        self.subscription,
                        str(acked[tp]),
                        "nothing" if mark.entry_id < 0 and mark.ledger_id < 0 else str(mark),
                        "checkpointed" if acked_where == "checkpoint" else "stored",
                    )
                )
        return found

    def _lost_checked(self, lost: dict[str, str], where: str) -> Checked:
        """``lost`` as error lines (``fail_on_data_loss``), or as warnings and the partitions the
        run reads again from their earliest message."""
        file = self.ctx.file
        if self.section.fail_on_data_loss:
            return Checked(
                [
                    f"{file}: {where}: {text}; resuming there could skip messages written since. "
                    f"To read the topic again from its start run `pipelines offsets reset {file} "
                    f"--to earliest --yes` (or set {self.key}.fail_on_data_loss: false)"
                    for text in lost.values()
                ],
                Offsets({}),
            )
        for text in lost.values():
            warn(f"{file}: {text}: this run reads it again from its earliest message")
        return Checked([], Offsets(dict.fromkeys(lost, Position.EARLIEST)))

    def plan(self, resume: Resume) -> list[str]:
        opts = SourceSettings.parse(self.options, streaming=True)
        planner = self._planner()
        try:
            parts = planner.partitions()
            latest = planner.latest(parts)
            start, where = resume
            if start is None:
                spec = self.section.starting_offsets or self.section.starting_time or "latest"
                start, why = resolve_start(planner, opts.starting, parts, latest), f"starting position {spec}"
            else:
                why = "the checkpoint" if where == "checkpoint" else f"the offset store {self.ctx.offsets}"
        finally:
            planner.close()
        lines = [f"topics: {len(parts)} topic-partition(s); starts from {why}"]
        for tp in parts:
            pos = start.get(tp, Position.EARLIEST)
            begin = "the earliest message" if pos.is_earliest else f"after {pos}"
            end = "empty" if latest[tp].entry_id < 0 else f"last message {latest[tp]}"
            lines.append(f"  {tp}: from {begin}; {end}")
        return lines

    def idle(self, committed: tuple[int, Offsets] | None) -> str | None:
        """Nothing to read after the checkpoint's last committed batch (``committed``: its id and
        end positions; None: a new checkpoint, whose first batch Spark must record)."""
        if self.section.wait_for_topic or committed is None:
            return None
        batch, start = committed
        opts = SourceSettings.parse(self.options, streaming=True)
        # on the durable subscription, as the source asks: a new partition gets its subscription
        planner = Planner(
            opts.settings,
            opts.selector,
            subscription=opts.subscription,
            poll_timeout_ms=opts.poll_timeout_ms,
            on_corrupt=opts.scan_on_corrupt,
        )
        try:
            parts = planner.partitions()
            latest = planner.latest(parts)
            for tp in parts:
                pos = start.get(tp, Position.EARLIEST)
                if pos > latest[tp]:
                    return None  # past the end: the source's failOnDataLoss rule decides
                if pos < latest[tp] and planner.scan(tp, pos, latest[tp], 1, None).rows:
                    return None
        finally:
            planner.close()
        return (
            f"[{self.ctx.name}] nothing to read: batch {batch} of the checkpoint is committed and no message "
            f"came after it in {len(parts)} topic-partition(s); Spark not started"
        )

    # -- the stream
    def _routes(self) -> bool:
        return self.section.on_corrupt_message != "fail"

    def stream(self, spark: Any, keep_positions: bool) -> Any:
        options = dict(self.options)
        if keep_positions and self.ctx.offsets is not None:  # no checkpoint: resume from the store
            options.update({"offsetStore": self.ctx.offsets, "job": self.ctx.name})
        if self._routes():  # undecodable messages come as rows: split() settles them
            options["onCorruptMessage"] = "quarantine"
        reader = spark.readStream.format("pulsarwire")
        for key, value in options.items():
            reader = reader.option(key, value)
        return reader.load()

    def empty(self, spark: Any) -> Any:
        return self.stream(spark, keep_positions=False)

    def split(self, df: Any) -> tuple[Any, Any] | None:
        if not self._routes():
            return None
        from pipelines.spark import quarantine

        return quarantine.split(df)

    def settle(self, bad: Any, batch: Batch) -> int:
        from pipelines.spark import quarantine

        table = self.section.quarantine_table
        if table is None:
            return quarantine.log_skipped(bad, self.ctx.name, batch.batch_id)
        app_id = f"pipelines/{self.ctx.name}/{batch.query_id}/quarantine"
        return quarantine.write_quarantine(
            bad, batch.batch_id, table, app_id, self.ctx.name, self.ctx.storage_options
        )

    def release(self, ends: Offsets) -> None:
        """Acknowledge the durable subscription up to ``ends`` (committed downstream). Raises
        PipelinesError when the broker cannot be told: the positions are then not stored either."""
        try:
            self._held().release(ends)
        except Exception as exc:
            raise PipelinesError(
                f"job {self.ctx.name}: acknowledging subscription {self.subscription!r} up to "
                f"{ends.to_json()} failed ({exc}); the batch is replayed"
            ) from exc

    def rewind(self, positions: Offsets) -> None:
        planner = self._planner(durable=True)
        try:
            planner.rewind(positions)
        finally:
            planner.close()

    def lag(self, ends: Offsets) -> int | None:
        """Messages not yet committed, all partitions. The broker counts the messages of the
        entries not yet released; a batch that ended inside a batched entry released only the
        entries before it, so the messages of that entry up to the batch's end are taken off."""
        try:
            backlog = subscription_lag(self.options, self._held()).per_partition
        except Exception as exc:  # informative only
            log.debug("lag unavailable: %s", exc)
            return None
        taken = {tp: pos.batch_index + 1 for tp, pos in ends.items() if pos.batch_index >= 0}
        return sum(max(0, n - taken.get(tp, 0)) for tp, n in backlog.items())

    # -- ranges
    def _batch_settings(self, start: Bound, end: Bound) -> SourceSettings:
        return SourceSettings.parse(self.section.batch_options(self.ctx.name, start, end), streaming=False)

    def read(self, spark: Any, start: Bound, end: Bound) -> Any:
        """The rows of ``(start, end]``; with ``quarantine`` the undecodable ones go to the
        quarantine table first (``skip`` leaves them out in the source already)."""
        reader = spark.read.format("pulsarwire")
        for key, value in self.section.batch_options(self.ctx.name, start, end).items():
            reader = reader.option(key, value)
        raw = reader.load()
        table = self.section.quarantine_table
        if table is None:
            return raw
        from pipelines.spark import quarantine

        raw = raw.cache()  # read once: split twice
        good, bad = quarantine.split(raw)
        key = hashlib.sha1(json.dumps([start.options(), end.options(end=True)]).encode()).hexdigest()[:16]
        app_id = f"pipelines/{self.ctx.name}/backfill/{key}/quarantine"
        quarantine.write_quarantine(bad, 0, table, app_id, self.ctx.name, self.ctx.storage_options)
        return good

    def bounds(self, start: Bound, end: Bound) -> tuple[Offsets, Offsets]:
        return bounds(self._batch_settings(start, end))

    def ends(self, start: Bound, end: Bound) -> Offsets:
        return bounds(self._batch_settings(start, end), ends_only=True)[1]

    def resolve(self, bound: Bound) -> Offsets:
        if bound.kind == "offsets":
            return Offsets({k: Position.parse(v, "--to") for k, v in (bound.offsets or {}).items()})
        return self.bounds(bound, Bound.model_construct(kind="latest"))[0]

    def start_now(self) -> Offsets:
        opts = SourceSettings.parse(self.options, streaming=True)
        planner = Planner(opts.settings, opts.selector)
        try:
            parts = planner.partitions()
            return resolve_start(planner, opts.starting, parts, planner.latest(parts))
        finally:
            planner.close()

    def backlog(self, stored: Offsets) -> dict[str, str]:
        planner = Planner(client_settings(self.options), TopicSelector())
        out: dict[str, str] = {}
        try:
            latest = planner.latest(list(stored))
            for tp, pos in stored.items():
                end = latest[tp]
                if pos > end:
                    out[tp] = f"end {end}  PAST THE END (data reset, another cluster or a recreated topic)"
                    continue
                scan = planner.scan(tp, pos, end, BACKLOG_SCAN_LIMIT, None)
                out[tp] = f"end {end}  backlog {'≥ ' if scan.more else ''}{scan.rows} messages"
        finally:
            planner.close()
        return out

    def taken_by(self, positions: Offsets) -> Any:
        from pyspark.sql import functions as F

        ledger, entry, index = F.col("ledgerId"), F.col("entryId"), F.col("batchIndex")
        condition = F.lit(False)
        for tp, pos in positions.items():
            if pos.is_earliest:
                continue
            if pos.entry_id < 0:  # L:-1:-1, everything before ledger L
                upto = ledger < pos.ledger_id
            else:
                same = (ledger == pos.ledger_id) & (entry == pos.entry_id)
                if pos.batch_index >= 0:
                    same = same & (index <= pos.batch_index)
                upto = (ledger < pos.ledger_id) | ((ledger == pos.ledger_id) & (entry < pos.entry_id)) | same
            condition = condition | ((F.col("topic") == tp) & upto)
        return condition

    def schema(self) -> Any:
        from pipelines.spark.reader import source_schema

        return source_schema(self.section.batch_options(self.ctx.name, *_EVERYTHING))


_EVERYTHING = (Bound.model_construct(kind="earliest"), Bound.model_construct(kind="latest"))


# -- the sink ----------------------------------------------------------------------------------
class PulsarSinkConnector(PlainSink):
    """``sink.pulsar``: each batch published with broker deduplication."""

    key = "sink.pulsar"
    section: PulsarSink

    def __init__(self, section: PulsarSink, ctx: JobContext) -> None:
        super().__init__(section, ctx)
        self.options = section.write_options(ctx.name)

    def reach(self) -> list[str]:
        return _reach(self.ctx, f"{self.key}.service_url", self.options)

    def check(self, df: Any) -> list[str]:
        from pipelines.spark.sink import sink_settings

        try:
            sink_settings(self.options, df.schema, streaming=True)
        except (SinkError, OptionError) as exc:
            return [self.ctx.line(self.key, f"the transformed rows do not fit: {exc}")]
        return []

    def write(self, df: Any, batch: Batch) -> None:
        from pipelines.spark.sink import write_pulsar_exactly_once

        opts = dict(self.options)
        if batch.query_id and "producerNamePrefix" in opts:  # a new query: new producer names
            opts["producerNamePrefix"] += "-" + batch.query_id[:8]
        write_pulsar_exactly_once(df, batch.batch_id, opts)
