"""The options of the ``pulsarwire`` sink: one field per option, shared by Spark and job files.

:class:`SinkFields` are the options a job file's ``sink.pulsar`` section and
``df.write(Stream).format("pulsarwire")`` share; :class:`SinkOptions` is what the Spark
sink reads: those plus ``batchId`` (exactly-once batch writes) and the ``pulsar.client.*``
options, with the rules that depend on whether the write is a stream (validation context
``streaming``). The producer defaults are pulsarwire's ``ProducerConfig`` defaults.
:mod:`pipelines.spark.sink` checks the input columns against the options;
:mod:`pipelines.jobs.models` builds ``sink.pulsar`` from :class:`SinkFields`; docs/sink.md's
option table is generated from these fields (:mod:`pipelines.options.docs`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, ValidationInfo, model_validator

from pipelines.errors import OptionError
from pipelines.options.client import CLIENT_PREFIX, ClientOptions, ClientSettings, ServiceUrl
from pipelines.options.grammar import show
from pipelines.options.model import (
    Flag,
    Loc,
    NonNegInt,
    OptionsModel,
    PosInt,
    Text,
    choice,
    context,
    option,
    problem,
    problems,
)
from pipelines.suggest import closest

#: keeps every sequence id below 2**63 (Pulsar's sequence ids are Java longs)
MAX_BATCH_ID = 2**31 - 1
MAX_PREFIX_LENGTH = 200

COMPRESSION = ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY")
HASHING = ("JavaStringHash", "Murmur3_32Hash")


def _prefix(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    value = value.strip()
    if not value:
        raise problem("must not be empty")
    if len(value) > MAX_PREFIX_LENGTH:
        raise problem(f"at most {MAX_PREFIX_LENGTH} characters, got {len(value)}")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise problem(f"must not contain spaces or control characters, got {show(value)}")
    return value


Compression = Annotated[Literal["NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"], choice(*COMPRESSION)]
Hashing = Annotated[Literal["JavaStringHash", "Murmur3_32Hash"], choice(*HASHING)]
ProducerPrefix = Annotated[str, BeforeValidator(_prefix)]


class SinkFields(OptionsModel):
    """The sink options a job file and Spark share (see the module docstring)."""

    UNKNOWN = "unknown sink option"
    SIDE = "sink"

    service_url: ServiceUrl = option(
        spark="service.url",
        doc="`pulsar://host:6650` or `pulsar+ssl://host:6651`",
    )
    topic: Text | None = option(
        None,
        spark="topic",
        doc="the topic for rows without a `topic` column value; required unless the input has "
        "a `topic` column",
    )
    batching: Flag = option(True, spark="batchingEnabled", doc="producer batching")
    batching_max_messages: PosInt = option(1000, spark="batchingMaxMessages", doc="messages per batch (≥ 1)")
    batching_max_publish_delay_ms: NonNegInt = option(
        10,
        spark="batchingMaxPublishDelayMs",
        doc="how long a batch may wait to fill (≥ 0)",
    )
    compression: Compression = option(
        "NONE",
        spark="compressionType",
        doc="`NONE`, `LZ4`, `ZLIB`, `ZSTD` or `SNAPPY` (case-insensitive)",
    )
    max_pending_messages: PosInt = option(
        1000,
        spark="maxPendingMessages",
        doc="messages waiting for receipts per producer (per partition); the task blocks while it is full",
    )
    send_timeout_ms: NonNegInt = option(
        30_000,
        spark="sendTimeoutMs",
        doc="a message without a receipt after this long fails the task (0: no timeout)",
    )
    hashing_scheme: Hashing = option(
        "JavaStringHash",
        spark="hashingScheme",
        doc="`JavaStringHash` or `Murmur3_32Hash`: how a key picks a partition (as the Java client)",
    )
    producer_name_prefix: ProducerPrefix | None = option(
        None,
        spark="producerNamePrefix",
        doc="the identity of the write (e.g. the job name); switches exactly-once on",
    )
    ignore_extra_columns: Flag = option(
        False,
        spark="ignoreExtraColumns",
        doc="drop columns the sink does not know instead of failing",
    )

    @classmethod
    def unknown(cls, key: str) -> OptionError:
        if key.lower() == "path":
            return OptionError("path", "the sink takes no path: give the topic option or a topic column")
        known = [a for a in cls.spark_names().values() if not a.endswith(".")]
        near = closest(key, known)
        hint = f"did you mean {near[0]}? " if near else ""
        return OptionError(key, f"{cls.UNKNOWN} ({hint}known: {', '.join(known)}, {CLIENT_PREFIX}*)")


class SinkOptions(SinkFields):
    """The options of ``df.write``/``df.writeStream.format("pulsarwire")``.

    Validate with ``SinkOptions.from_spark(options, streaming=...)``.
    """

    IGNORED = frozenset({"checkpointlocation"})

    batch_id: NonNegInt | None = option(
        None,
        spark="batchId",
        doc="batch writes in exactly-once mode: the version of this write, an integer in "
        "[0, 2**31 - 1]; required with `producerNamePrefix`, refused without it and on streams",
    )
    client: ClientOptions = option(
        default_factory=ClientOptions,
        spark=CLIENT_PREFIX,
        doc="client settings (`operationTimeoutMs`, TLS, `authToken`, `authPluginClassName` + "
        "`authParams` as in [spark.md](spark.md), ...), see `pipelines/options/client.py`",
    )

    @model_validator(mode="after")
    def _spark_rules(self, info: ValidationInfo) -> SinkOptions:
        streaming = context(info, "streaming")
        found: list[tuple[Loc, str]] = []
        if self.batch_id is not None:
            if streaming:
                found.append(
                    (("batch_id",), "not for streaming writes: each micro-batch uses its own batch id")
                )
            elif self.producer_name_prefix is None:
                found.append((("batch_id",), "only meaningful with producerNamePrefix (exactly-once mode)"))
            elif self.batch_id > MAX_BATCH_ID:
                found.append((("batch_id",), f"must be <= {MAX_BATCH_ID} (2**31 - 1), got {self.batch_id}"))
        elif self.producer_name_prefix is not None and streaming is False:
            found.append(
                (
                    ("batch_id",),
                    "required with producerNamePrefix on a batch write: an integer >= 0 naming this "
                    "write; rerunning the same data with the same batchId publishes it only once",
                )
            )
        if found:
            raise problems(found)
        return self

    def client_settings(self) -> ClientSettings:
        """The client settings. Raises OptionError for bad ``auth*`` options."""
        return self.client.settings(self.service_url)
