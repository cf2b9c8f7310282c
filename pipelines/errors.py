"""Errors of the pipelines package: one root, each names what the user must fix.

Option errors name the option (``startingOffsets: ...``); job errors
name the job file and the YAML key. Everything raised from a Spark task or the
driver that is our fault to explain derives from :class:`PipelinesError`.
"""

from __future__ import annotations

import re


class PipelinesError(Exception):
    """Root of every error raised by ``pipelines``."""


class OptionError(PipelinesError, ValueError):
    """A data source option is missing, unknown, malformed or conflicts with another."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"{option}: {message}")
        self.option = option


class DataLossError(PipelinesError):
    """A position the stream must read from no longer exists (retention, trimming).

    ``topic`` is the topic-partition, ``missing_from``/``missing_to`` the range that is gone.
    """

    def __init__(self, topic: str, missing_from: str, missing_to: str, hint: str = "") -> None:
        super().__init__(
            f"{topic}: messages after {missing_from} up to {missing_to} are no longer available "
            f"(removed by retention or trimming){hint}"
        )
        self.topic = topic
        self.missing_from = missing_from
        self.missing_to = missing_to


class CorruptMessageError(PipelinesError):
    """A message of the source cannot be decoded (``onCorruptMessage=fail``): names the
    topic-partition, the message id and the reason, and how to let the stream go on."""

    def __init__(self, topic: str, message_id: str, reason: str) -> None:
        super().__init__(
            f"{topic}: message {message_id} is corrupt and cannot be decoded ({reason}); nothing of "
            "this batch is written: set onCorruptMessage (job key on_corrupt_message) to skip or "
            "quarantine to go on without it"
        )
        self.topic = topic
        self.message_id = message_id
        self.reason = reason


class MissingTopicError(PipelinesError):
    """A topic the source reads does not exist (the source never creates topics).

    ``topic`` is the full name, ``namespace`` its ``tenant/namespace`` and ``closest`` the
    namespace's existing topics whose names are nearest to it (possibly empty).
    """

    def __init__(self, topic: str, namespace: str, closest: tuple[str, ...], listed: bool = True) -> None:
        if closest:
            near = f"; closest topics in {namespace}: {', '.join(closest)}"
        elif listed:
            near = f"; {namespace} has no topic with a similar name"
        else:
            near = ""
        super().__init__(f"topic {topic} does not exist{near}")
        self.topic = topic
        self.namespace = namespace
        self.closest = closest


class OffsetsAheadError(PipelinesError):
    """A stored or checkpointed position is past the end of its topic-partition.

    The broker's data was reset, the job points at another cluster, or the topic was deleted
    and created again: resuming there would read nothing and skip everything written later.
    """

    def __init__(self, topic: str, stored: str, end: str, where: str = "stored", hint: str = "") -> None:
        super().__init__(
            f"{topic}: the {where} position {stored} is past the topic's end {end} (the broker's data "
            f"was reset, the job points at another cluster, or the topic was recreated){hint}"
        )
        self.topic = topic
        self.stored = stored
        self.end = end


class SinkError(PipelinesError):
    """Writing to Pulsar failed; the Spark task fails rather than dropping rows."""


class OffsetStoreError(PipelinesError):
    """The Delta offset store could not be read or written."""


class StaleEpochError(OffsetStoreError):
    """A run tried to record positions after the job's positions were reset (``offsets reset``)
    while it ran: nothing is recorded, and the next run starts from the reset positions."""


class SubscriptionLostError(PipelinesError):
    """The job's durable subscription is gone while its positions say it has read the topic.

    The subscription lives on the broker with the topic's data, and is acknowledged up to every
    position the job stores: one that is missing (created again from nothing when the job
    subscribes) means the broker lost its data, the topic was deleted and created again, or the
    subscription was deleted or expired. Messages written since may sit at positions the job
    believes it has read: resuming there would skip them.
    """

    def __init__(self, topic: str, subscription: str, stored: str, acked: str, where: str = "stored") -> None:
        super().__init__(
            f"{topic}: the job's subscription {subscription!r} is acknowledged only up to {acked}, "
            f"not up to the {where} position {stored}: it was created again (the broker lost its "
            "data, the topic was deleted and created again, or the subscription was deleted)"
        )
        self.topic = topic
        self.subscription = subscription
        self.stored = stored


class JobError(PipelinesError, ValueError):
    """A job file, its profile or a ``--set`` override is invalid; raised before Spark starts.

    ``problems`` holds one line per problem, ``file: key.path: message`` (``file:line:col:
    message`` for YAML syntax errors); ``str()`` joins them with newlines. Never holds secrets.
    """

    def __init__(self, problems: str | list[str] | tuple[str, ...]) -> None:
        self.problems: tuple[str, ...] = (problems,) if isinstance(problems, str) else tuple(problems)
        super().__init__("\n".join(self.problems))


def describe(exc: BaseException) -> str:
    """``Type: message`` for an error, without the type twice (pulsarwire's ServerErrors already
    start their message with it)."""
    text, name = str(exc), type(exc).__name__
    return text if text.startswith(name) else f"{name}: {text}" if text else name


#: the line a Python traceback ends with, e.g. "pipelines.errors.SinkError: ..." (also inside the
#: text of a Spark error that carries a Python worker's or foreachBatch's traceback)
_TASK_ERROR = re.compile(r"^(?:\w+\.)*(?:pipelines|pulsarwire)\.errors\.(\w+): (.+)$", re.MULTILINE)
#: Spark's error classes in front of a message: "[STREAM_FAILED] Query [id = ..] terminated with ..."
_SPARK_CLASS = re.compile(r"^\[[A-Z_.]+\]\s*")


def task_errors(text: str) -> list[tuple[str, str]]:
    """The (class name, message) of every pipelines/pulsarwire error in a traceback's text."""
    return [(m.group(1), m.group(2).strip()) for m in _TASK_ERROR.finditer(text)]


#: a line naming an error: "org.apache.spark.SparkRuntimeException: [CLASS] message", "Caused by: ..."
_CAUSE = re.compile(r"^\s*(?:Caused by: )?(?:[\w$]+\.)*([A-Z][\w$]*(?:Exception|Error)): (.+)$", re.MULTILINE)
#: errors that only carry another one
_WRAPPERS = {
    "StreamingQueryException",
    "ForeachBatchUserFuncException",
    "Py4JJavaError",
    "Py4JError",
    "PythonException",
    "SparkException",
    "ExecutionException",
    "InvocationTargetException",
    "UndeclaredThrowableException",
    "PipelinesError",
}


def short_error(exc: BaseException, limit: int = 400) -> str:
    """One line saying what failed: the innermost pipelines/pulsarwire error that a Spark or
    Py4J error carries, else the first error it carries that is not just a wrapper (a Python
    traceback in the message, a Java stack trace), else its own first line."""
    if isinstance(exc, PipelinesError):
        text = str(exc)
    else:
        full = f"{exc}\n{getattr(exc, '_stackTrace', None) or ''}"
        found = task_errors(full)
        causes = [(n, m) for n, m in _CAUSE.findall(full) if n not in _WRAPPERS]
        if found:
            name, message = found[-1]
            text = message if name in _OWN else f"{name}: {message}"
        elif causes:
            name, message = causes[0]
            text = f"{name}: {_SPARK_CLASS.sub('', message.strip())}"
        else:
            first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
            first = _SPARK_CLASS.sub("", first)
            text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: our own classes, whose messages say enough without the class name
_OWN = {
    "PipelinesError",
    "OptionError",
    "DataLossError",
    "MissingTopicError",
    "OffsetsAheadError",
    "SinkError",
    "OffsetStoreError",
    "StaleEpochError",
    "SubscriptionLostError",
    "JobError",
}
