"""Option names from other Spark connectors: what moves over to ``format("pulsarwire")`` and what does not.

A job written for StreamNative's ``pulsar-spark`` connector (``format("pulsar")``) or for Spark's
Kafka source uses names this source does not define. Each such name is one :class:`Foreign`
entry of :data:`FOREIGN` (names as those connectors document them), which says what happens:

* ``rename`` — accepted and used as our option ``ours`` (StreamNative's ``predefinedSubscription``
  is our ``subscriptionName``; ``pulsar.reader.receiverQueueSize`` our ``receiverQueueSize``;
  ``pulsar.producer.<sink option>`` the sink option of that name);
* ``ignore`` — accepted, nothing to do here (``admin.url`` and ``pulsar.admin.*``: pulsarwire asks
  the broker over the binary protocol and needs no admin API);
* ``refuse`` — an OptionError saying why and what to write instead; for Kafka's names it says that
  the name is the Kafka spelling and names ours (``maxOffsetsPerTrigger`` → ``maxMessagesPerTrigger``).

:func:`resolve` answers for a Spark option (:meth:`pipelines.options.model.OptionsModel.spark_data`
asks it before calling a name unknown); :func:`job_key_hint` gives the same advice for a job
file key (the job loader's "unknown key" line), where nothing is renamed: a job file is written
for pipelines, so a foreign name is always pointed at ours. Names are compared without case,
``_`` and ``.`` (``max_offsets_per_trigger`` is ``maxOffsetsPerTrigger``). docs/spark.md's
migration table lists the same entries.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["FOREIGN", "JAVA_CLIENT", "Foreign", "java_client_hint", "job_key_hint", "resolve"]

Use = Literal["rename", "ignore", "refuse"]
Side = Literal["source", "sink", "both"]

KAFKA = "the Kafka source's"
STREAMNATIVE = "StreamNative's pulsar-spark connector's"


@dataclass(frozen=True)
class Foreign:
    """A name another connector uses: ``name`` (``prefix`` when it ends with ``.``), whose it is,
    what happens to it here and on which side (source, sink or both)."""

    name: str
    origin: str
    use: Use
    ours: str | None = None  # our Spark option (rename: the one used; refuse: the one to write)
    why: str = ""
    side: Side = "both"

    def message(self, ours: str | None = None, *, job: bool = False) -> str:
        """What to tell a user who wrote this name (the line names it already); ``ours`` is our
        name for it as they write it (the Spark option, or in a job file (``job``) its job key)."""
        ours = ours or self.ours
        if self.use == "ignore":
            return f"{self.origin} option, not needed here: {self.why}" + (
                "; remove it" if job else " (accepted, not used)"
            )
        if self.origin == KAFKA and ours:
            return f"{KAFKA} spelling; here it is {ours}" + (f" ({self.why})" if self.why else "")
        if self.use == "rename" and ours:  # only said in job files: Spark takes it as ours
            return f"{self.origin} name; here it is {ours}"
        text = f"{self.origin} option, not taken here: {self.why}"
        return text + (f" (job key {ours})" if job and ours and ours != self.ours else "")


def _norm(name: str) -> str:
    return name.lower().replace("_", "").replace(".", "").replace("-", "")


FOREIGN: tuple[Foreign, ...] = (
    # -- StreamNative's pulsar-spark connector -------------------------------------------------
    Foreign(
        "admin.url",
        STREAMNATIVE,
        "ignore",
        why="pulsarwire reads topics, partitions and positions over the binary protocol (service.url)",
    ),
    Foreign(
        "pulsar.admin.",
        STREAMNATIVE,
        "ignore",
        why="the admin client's settings; pulsarwire uses no admin API (credentials go in pulsar.client.*)",
    ),
    Foreign("predefinedSubscription", STREAMNATIVE, "rename", "subscriptionName", side="source"),
    Foreign("waitingForNonExistedTopic", STREAMNATIVE, "rename", "waitForTopic", side="source"),
    Foreign("pulsar.reader.receiverQueueSize", STREAMNATIVE, "rename", "receiverQueueSize", side="source"),
    Foreign(
        "subscriptionPrefix",
        STREAMNATIVE,
        "refuse",
        "subscriptionName",
        why="a stream keeps one durable subscription, named by subscriptionName (default derived from "
        "the topics and job); batch reads use none",
        side="source",
    ),
    Foreign(
        "maxEntriesPerTrigger",
        STREAMNATIVE,
        "refuse",
        "maxMessagesPerTrigger",
        why="it counts entries (whole batches); admission control here counts messages "
        "(maxMessagesPerTrigger) or payload bytes (maxBytesPerTrigger)",
        side="source",
    ),
    Foreign(
        "allowDifferentTopicSchemas",
        STREAMNATIVE,
        "refuse",
        "schema",
        why="values are raw bytes unless schema=auto, which needs one schema for all topics; drop it",
        side="source",
    ),
    Foreign(
        "topic.schema.class",
        STREAMNATIVE,
        "refuse",
        "schema",
        why="a Java class needs a JVM connector; the sink writes the value column's bytes as they are",
        side="sink",
    ),
    Foreign(
        "pulsar.reader.",
        STREAMNATIVE,
        "refuse",
        "receiverQueueSize",
        why="each range is read by a reader the source configures; its one setting is receiverQueueSize",
        side="source",
    ),
    Foreign(
        "pulsar.producer.",
        STREAMNATIVE,
        "refuse",
        why="not a producer setting here; the sink's producer settings are its own options (batchingEnabled, "
        "batchingMaxMessages, batchingMaxPublishDelayMs, compressionType, maxPendingMessages, "
        "sendTimeoutMs, hashingScheme; names are derived for exactly-once: producerNamePrefix)",
        side="sink",
    ),
    # -- Spark's Kafka source and sink ---------------------------------------------------------------
    Foreign("maxOffsetsPerTrigger", KAFKA, "refuse", "maxMessagesPerTrigger", side="source"),
    Foreign("minOffsetsPerTrigger", KAFKA, "refuse", "minMessagesPerTrigger", side="source"),
    Foreign("kafka.bootstrap.servers", KAFKA, "refuse", "service.url", why="pulsar://host:6650"),
    Foreign("subscribe", KAFKA, "refuse", "topics", why="or topic for one", side="source"),
    Foreign("subscribePattern", KAFKA, "refuse", "topicsPattern", side="source"),
    Foreign(
        "assign",
        KAFKA,
        "refuse",
        "topic",
        why="partitioned topics expand to their partitions; name a partition as topic-partition-N",
        side="source",
    ),
    Foreign(
        "startingOffsetsByTimestamp",
        KAFKA,
        "refuse",
        "startingTime",
        why="one publish time for every partition",
        side="source",
    ),
    Foreign(
        "endingOffsetsByTimestamp",
        KAFKA,
        "refuse",
        "endingTime",
        why="one publish time for every partition",
        side="source",
    ),
    Foreign("startingTimestamp", KAFKA, "refuse", "startingTime", side="source"),
    Foreign("endingTimestamp", KAFKA, "refuse", "endingTime", side="source"),
    Foreign("groupIdPrefix", KAFKA, "refuse", "subscriptionName", side="source"),
    Foreign("kafka.group.id", KAFKA, "refuse", "subscriptionName", side="source"),
    Foreign("includeHeaders", KAFKA, "refuse", "includeProperties", why="message properties", side="source"),
    Foreign("fetchOffset.numRetries", KAFKA, "refuse", "pollTimeoutMs", side="source"),
    Foreign(
        "kafka.",
        KAFKA,
        "refuse",
        "pulsar.client.*",
        why="the Kafka client's properties; the Pulsar client's settings are pulsar.client.*",
    ),
)

_EXACT = {_norm(f.name): f for f in FOREIGN if not f.name.endswith(".")}
_PREFIXES = [f for f in FOREIGN if f.name.endswith(".")]


def _find(name: str, side: Side) -> Foreign | None:
    found = _EXACT.get(_norm(name))
    if found is None:
        low = name.lower()
        found = next((f for f in _PREFIXES if low.startswith(f.name.lower())), None)
    if found is None or found.side not in ("both", side):
        return None
    return found


def resolve(name: str, side: Side, ours: frozenset[str]) -> tuple[Use, str, str]:
    """What the Spark option ``name`` (not one of ours) becomes on ``side``.

    ``ours`` are the side's own option names (lower case). Returns ``(use, what, label)``:
    ``("rename", our option, ...)``, ``("ignore", message, ...)`` or ``("refuse", message,
    ...)``; ``what`` is ``""`` for a name no connector here knows (the caller's "unknown
    option" with its hint). ``label`` is the option as its connector spells it (Spark hands
    Python sources their option names in lower case).
    """
    foreign = _find(name, side)
    if foreign is None:
        return "refuse", "", name
    label = name if foreign.name.endswith(".") else foreign.name
    if foreign.name == "pulsar.producer." and name[len(foreign.name) :].lower() in ours:
        return "rename", name[len(foreign.name) :], label  # pulsar.producer.batchingEnabled: the sink's
    if foreign.use == "rename" and foreign.ours is not None:
        return "rename", foreign.ours, label
    return foreign.use, foreign.message(), label


def job_key_hint(key: str, side: Side, job_keys: dict[str, str]) -> str | None:
    """The advice for an unknown job file key ``key`` on ``side`` (None when no connector uses it).

    ``job_keys`` maps our Spark options to their job keys (``maxMessagesPerTrigger`` →
    ``max_messages_per_trigger``).
    """
    foreign = _find(key, side)
    if foreign is None:
        return None
    ours = job_keys.get(foreign.ours, foreign.ours) if foreign.ours else None
    return foreign.message(ours, job=True)


#: Java ``ClientConfigurationData`` settings (``pulsar.client.*`` in StreamNative's connector) that
#: pulsarwire's client has no equivalent of, and why; the ones it has are ClientFields' options
JAVA_CLIENT: dict[str, str] = {
    **dict.fromkeys(
        (
            "numIoThreads",
            "numListenerThreads",
            "connectionsPerBroker",
            "useTcpNoDelay",
            "enableBusyWait",
            "statsIntervalSeconds",
            "memoryLimitBytes",
            "maxConcurrentLookupRequest",
            "concurrentLookupRequest",
            "maxLookupRequest",
            "maxNumberOfRejectedRequestPerConnection",
            "connectionMaxIdleSeconds",
            "initialBackoffIntervalNanos",
            "maxBackoffIntervalNanos",
        ),
        "Java client tuning without an equivalent in pulsarwire's client (one asyncio loop per "
        "process, one connection per broker); remove it",
    ),
    "serviceUrl": "give it as service.url",
    "useTls": "TLS follows the URL: pulsar+ssl:// in service.url",
    "requestTimeoutMs": "pulsarwire's client times requests with operationTimeoutMs",
    "lookupTimeoutMs": "pulsarwire's client times lookups with operationTimeoutMs",
    "proxyServiceUrl": "pulsarwire's client has no SNI proxy routing; point service.url at the proxy",
    "listenerName": "pulsarwire's client asks for no advertised listener: the broker's default one answers",
}


def java_client_hint(name: str) -> str | None:
    """Why the Java client setting ``name`` (after ``pulsar.client.``) is not taken; None when it is
    not a Java client setting known here."""
    why = {k.lower(): v for k, v in JAVA_CLIENT.items()}.get(name.lower())
    return f"the Java client's setting, not taken here: {why}" if why else None
