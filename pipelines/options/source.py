"""The options of the ``pulsarwire`` source: one field per option, shared by Spark and job files.

:class:`SourceFields` are the options a job file's ``source.pulsar`` section and
``spark.readStream.format("pulsarwire")`` share, with the rules between them (exactly one
topic selector, min ≤ max messages per trigger, ...). :class:`SourceOptions` is what the
Spark data source reads: those plus the batch-read bounds (``endingOffsets``,
``endingTime``), the offset store and the ``pulsar.client.*`` options, with the rules that
depend on whether the query is a stream (validation context ``streaming``: True, False, or
absent when not known yet). :mod:`pipelines.spark.reader` turns a validated
:class:`SourceOptions` into what the driver resolves; :mod:`pipelines.jobs.models` builds
``source.pulsar`` from :class:`SourceFields`. docs/spark.md's option table is generated
from these fields (:mod:`pipelines.options.docs`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import ValidationInfo, model_validator

from pipelines.options.client import CLIENT_PREFIX, ClientOptions, ClientSettings, ServiceUrl
from pipelines.options.model import (
    Duration,
    Flag,
    Loc,
    Offsets,
    OptionsModel,
    PosInt,
    Text,
    TimeMs,
    TopicList,
    choice,
    context,
    is_spark,
    label,
    option,
    problems,
)

#: onCorruptMessage values, the default first
ON_CORRUPT = ("fail", "skip", "quarantine")
#: the default maxTriggerDelay
MAX_TRIGGER_DELAY = "15m"

OnCorrupt = Annotated[Literal["fail", "skip", "quarantine"], choice(*ON_CORRUPT)]
SchemaMode = Annotated[Literal["raw", "auto"], choice("raw", "auto")]


class SourceFields(OptionsModel):
    """The source options a job file and Spark share (see the module docstring)."""

    SIDE = "source"

    service_url: ServiceUrl = option(
        spark="service.url",
        doc="`pulsar://` or `pulsar+ssl://`, several hosts comma-separated",
    )
    topic: Text | None = option(
        None,
        spark="topic",
        doc="a topic; exactly one of `topic`, `topics`, `topicsPattern`; partitioned topics expand to "
        "their partitions",
    )
    topics: TopicList | None = option(None, min_length=1, spark="topics", doc="a comma list of topics")
    topics_pattern: Text | None = option(
        None,
        spark="topicsPattern",
        doc="a regular expression (full match, as Pulsar) over `tenant/namespace`",
    )
    starting_offsets: Offsets | None = option(
        None,
        spark="startingOffsets",
        doc='`earliest` \\| `latest` \\| JSON `{"topic-partition": "ledger:entry:batch"}` '
        '(also `"earliest"`, `"latest"`, `-2`, `-1` per partition). Exclusive: reading starts *after* '
        "the position. Default: `earliest` for batch reads, `latest` for streams",
    )
    starting_time: TimeMs | None = option(
        None,
        spark="startingTime",
        doc="publish time in ms or ISO-8601 (`2026-11-23T10:00:00Z`; naive = UTC). Exact: starts at "
        "the first message published at or after the time. Not with `startingOffsets`",
    )
    max_messages_per_trigger: PosInt | None = option(
        None,
        spark="maxMessagesPerTrigger",
        doc="streams: admission control, messages per micro-batch; at least one message per partition "
        "with data is admitted",
    )
    max_bytes_per_trigger: PosInt | None = option(
        None,
        spark="maxBytesPerTrigger",
        doc="streams: admission control, payload bytes per micro-batch; at least one message per "
        "partition with data is admitted",
    )
    min_messages_per_trigger: PosInt | None = option(
        None,
        spark="minMessagesPerTrigger",
        doc="streams: wait for that many messages, or at most `maxTriggerDelay`; not above "
        "`maxMessagesPerTrigger`",
    )
    max_trigger_delay: Duration = option(
        MAX_TRIGGER_DELAY,
        spark="maxTriggerDelay",
        doc="how long `minMessagesPerTrigger` may wait (`500ms`, `30s`, `15m`, `1h`); only with it",
    )
    fail_on_data_loss: Flag = option(
        True,
        spark="failOnDataLoss",
        doc="a start position that retention removed fails the query naming the topic-partition and "
        "the missing range; `false` logs the gap and goes on. A stream's start (checkpoint or offset "
        "store) past the partition's last message — the broker's data was reset, another cluster, a "
        "recreated topic — fails with `OffsetsAheadError` naming the position and the end (checked at "
        "the start and for every batch); `false` warns and reads that partition again from its earliest "
        "message. A reset broker whose new ledger ids reach past the stored position is found by the "
        "job's durable subscription (it is acknowledged up to every stored position; a new one up to "
        "nothing): `pipelines run` checks it before starting (docs/jobs.md)",
    )
    wait_for_topic: Flag = option(
        False,
        spark="waitForTopic",
        doc="streams. The source never creates a topic (it asks with "
        "`metadata_auto_creation_enabled=false` and subscribes with `force_topic_creation=false`): a "
        "topic that does not exist fails the query naming the namespace's closest topics. `true`: "
        "batches stay empty until it is created",
    )
    subscription: Text | None = option(
        None,
        spark="subscriptionName",
        doc="streams: the durable subscription that holds the backlog (default derived from the "
        "topic selection and `job`)",
    )
    schema_: SchemaMode = option(
        "raw",
        alias="schema",
        spark="schema",
        doc="`raw` (`value` as bytes) or `auto` (`value` typed by the topics' Pulsar schema: AVRO, JSON, "
        "primitives; [schemas.md](schemas.md))",
    )
    include_properties: Flag = option(
        True,
        spark="includeProperties",
        doc="`false` drops the `properties` column",
    )
    poll_timeout_ms: PosInt = option(
        30_000,
        spark="pollTimeoutMs",
        doc="how long an executor waits for the next message of its range",
    )
    receiver_queue_size: PosInt = option(
        10_000, spark="receiverQueueSize", doc="executor prefetch in messages"
    )
    min_partitions: PosInt | None = option(
        None,
        spark="minPartitions",
        doc="the least number of Spark tasks for a batch read and for each micro-batch: with fewer "
        "topic-partitions, large ranges are cut into sub-ranges of whole entries, in proportion to "
        "their number of entries (below). Offsets stay per topic-partition",
    )
    on_corrupt_message: OnCorrupt = option(
        "fail",
        spark="onCorruptMessage",
        doc="what a message that cannot be decoded becomes: `fail`, `skip` or `quarantine` (below)",
    )

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> SourceFields:
        def name(field: str) -> str:
            return label(info, type(self), field)

        found: list[tuple[Loc, str]] = []
        selectors = ("topic", "topics", "topics_pattern")
        given = [k for k in selectors if getattr(self, k) is not None]
        if len(given) != 1:
            got = f" (got {', '.join(name(k) for k in given)})" if given else ""
            at: Loc = ("topic",) if is_spark(info) else ()
            found.append((at, f"give exactly one of {', '.join(name(k) for k in selectors)}{got}"))
        if self.topics_pattern is not None:
            try:
                re.compile(self.topics_pattern)
            except re.error as exc:
                found.append((("topics_pattern",), f"not a regular expression: {exc}"))
        if self.starting_offsets is not None and self.starting_time is not None:
            found.append(
                (("starting_time",), f"give {name('starting_offsets')} or {name('starting_time')}, not both")
            )
        lo, hi = self.min_messages_per_trigger, self.max_messages_per_trigger
        if lo is not None and hi is not None and lo > hi:
            found.append(
                (("min_messages_per_trigger",), f"{lo} is above {name('max_messages_per_trigger')} {hi}")
            )
        if "max_trigger_delay" in self.model_fields_set and lo is None:
            found.append((("max_trigger_delay",), f"only with {name('min_messages_per_trigger')}"))
        if found:
            raise problems(found)
        return self


_STREAM_ONLY = ("max_messages_per_trigger", "max_bytes_per_trigger", "min_messages_per_trigger")


class SourceOptions(SourceFields):
    """The options of ``spark.read``/``spark.readStream.format("pulsarwire")``.

    Validate with ``SourceOptions.from_spark(options, streaming=...)``.
    """

    ending_offsets: Offsets | None = option(
        None,
        spark="endingOffsets",
        doc="batch reads: `latest` (when absent) or JSON as `startingOffsets`; inclusive",
    )
    ending_time: TimeMs | None = option(
        None,
        spark="endingTime",
        doc="batch reads: publish time in ms or ISO-8601; ends before it. Not with `endingOffsets`",
    )
    offset_store: Text | None = option(
        None,
        spark="offsetStore",
        doc="streams started without a checkpoint resume from this Delta offset store (see below); "
        "needs `job`",
    )
    job: Text | None = option(None, spark="job", doc="the job whose positions `offsetStore` holds")
    client: ClientOptions = option(
        default_factory=ClientOptions,
        spark=CLIENT_PREFIX,
        doc="client settings: "
        + ", ".join(f"`{a}`" for a in ClientOptions.spark_names().values())
        + " (below)",
    )

    @model_validator(mode="after")
    def _spark_rules(self, info: ValidationInfo) -> SourceOptions:
        streaming = context(info, "streaming")
        found: list[tuple[Loc, str]] = []
        if self.ending_offsets is not None and self.ending_time is not None:
            found.append((("ending_time",), "give endingOffsets or endingTime, not both"))
        if streaming and (self.ending_offsets is not None or self.ending_time is not None):
            found.append((("ending_offsets",), "only for batch queries (spark.read), not for readStream"))
        if self.ending_offsets == "earliest":
            found.append((("ending_offsets",), "earliest is not a valid end"))
        if streaming is False:
            for field in _STREAM_ONLY:
                if getattr(self, field) is not None:
                    found.append(((field,), "only for streaming queries (spark.readStream)"))
            if self.wait_for_topic:
                found.append((("wait_for_topic",), "only for streaming queries (spark.readStream)"))
        if self.offset_store is not None and self.job is None:
            found.append((("job",), "required with offsetStore (the job whose positions to resume from)"))
        if found:
            raise problems(found)
        return self

    def client_settings(self) -> ClientSettings:
        """The client settings. Raises OptionError for bad ``auth*`` options."""
        return self.client.settings(self.service_url)
