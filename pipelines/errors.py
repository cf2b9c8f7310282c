"""Errors of the pipelines package: one root, each names what the user must fix.

Option errors name the option (``startingOffsets: ...``); job errors (issue 7)
name the job file and the YAML key. Everything raised from a Spark task or the
driver that is our fault to explain derives from :class:`PipelinesError`.
"""

from __future__ import annotations


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


class SinkError(PipelinesError):
    """Writing to Pulsar failed; the Spark task fails rather than dropping rows."""


class OffsetStoreError(PipelinesError):
    """The Delta offset store could not be read or written."""


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
