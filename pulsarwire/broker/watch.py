"""Topic-list patterns and watchers (GET_TOPICS_OF_NAMESPACE, WATCH_TOPIC_LIST).

Patterns come from clients, so they run on a linear-time engine: RE2 (the ``google-re2``
package; Pulsar itself uses RE2/J). A pattern is compiled by :func:`compile_topics_pattern`,
which tells apart the three reasons a broker does not evaluate one, so each request can
answer as Pulsar does:

* :class:`PatternTooLong` -- longer than the broker's cap once the ``persistent://`` scheme is
  removed (Pulsar's ``subscriptionPatternMaxLength``);
* :class:`PatternUnsupported` -- a valid regular expression that RE2 refuses (look-around,
  back-references) or that outgrows RE2's memory budget;
* :class:`InvalidTopicsPattern` -- not a regular expression at all.

Patterns are matched against the full topic name of the partitioned parent without its
scheme (``tenant/ns/topic``), the way Pulsar's TopicList filters, and the hash is Pulsar's
topic-list hash.

The watcher registry is pure bookkeeping: the connection registers a watcher and the broker
calls :meth:`TopicWatchers.topic_created` whenever a topic appears; it returns the updates to
send. Watchers are indexed by namespace, so a topic creation costs one RE2 match per watcher
of its namespace, plus the hash of that watcher's (sorted, C-speed) topic list when it matches.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import re2

from pulsarwire.codec.frames import crc32c
from pulsarwire.naming import TopicName

#: Default cap on a pattern's length without scheme. Pulsar's subscriptionPatternMaxLength
#: defaults to 50; ours is larger because the engine is linear anyway and clients that are
#: refused a watcher fall back to slow polling.
MAX_TOPICS_PATTERN_LENGTH = 1024
#: Default cap on topic-list watchers per connection (Pulsar has none; a client opens one per
#: pattern consumer).
MAX_WATCHERS_PER_CONNECTION = 64
#: RE2's memory budget per compiled pattern (program and DFA cache); past it RE2 refuses to
#: compile, or falls back to its slower (still linear) NFA while matching.
_RE2_MAX_MEM = 1 << 20

_SCHEME = re.compile(r"^(non-)?persistent://")


class InvalidTopicsPattern(ValueError):
    """A topics pattern that is not a regular expression."""


class PatternUnsupported(InvalidTopicsPattern):
    """A valid regular expression that RE2 cannot run in linear time (look-around, back-references...)."""


class PatternTooLong(ValueError):
    """A topics pattern longer than the broker's cap."""


@dataclass(frozen=True, eq=False)
class TopicsPattern:
    """A compiled topics pattern (``source`` is without the scheme)."""

    source: str
    regex: Any  # re2._Regexp (the package ships no type information)

    def matches(self, topic: str) -> bool:
        """Full match of a topic's partitioned parent without scheme, as Pulsar filters topic lists."""
        parent = str(TopicName.parse(topic).partitioned_topic)
        return self.regex.fullmatch(_SCHEME.sub("", parent)) is not None

    def filter(self, topics: Iterable[str]) -> list[str]:
        return [t for t in topics if self.matches(t)]


def _re2_options() -> Any:
    options = re2.Options()
    options.max_mem = _RE2_MAX_MEM
    options.log_errors = False  # RE2 would print every refused pattern on stderr
    options.never_capture = True
    return options


_OPTIONS = _re2_options()


def compile_topics_pattern(pattern: str, max_length: int = MAX_TOPICS_PATTERN_LENGTH) -> TopicsPattern:
    """Compile a client's topics pattern for linear-time matching.

    Raises PatternTooLong, PatternUnsupported or InvalidTopicsPattern (see the module docstring).
    """
    source = _SCHEME.sub("", pattern)
    if len(source) > max_length:
        raise PatternTooLong(f"Pattern longer than maximum: {max_length}")
    try:
        return TopicsPattern(source, re2.compile(source, _OPTIONS))
    except re2.error as exc:
        reason = _re2_reason(exc)
    try:
        re.compile(source)  # only tells "valid but unsupported" from "invalid"; never matches
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise InvalidTopicsPattern(f"{source!r}: {exc}") from None
    raise PatternUnsupported(f"{source!r} cannot run in linear time: {reason}")


def _re2_reason(exc: Exception) -> str:
    arg = exc.args[0] if exc.args else ""
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def topics_hash(topics: Iterable[str]) -> str:
    """Pulsar's topic-list hash: CRC32C over the sorted names, printed as Guava does (little-endian hex).

    One CRC over the concatenation equals the chained CRC of each name; all of it runs in C.
    """
    return _hash_of_sorted([t.encode() for t in sorted(topics)])


def _hash_of_sorted(encoded: list[bytes]) -> str:
    # CRC chained over slices: joining slices keeps each buffer small enough to be reused, where
    # one join of the whole list allocates fresh pages every time (5x slower for 5,000 names).
    crc = 0
    for i in range(0, len(encoded), _HASH_SLICE):
        crc = crc32c(b"".join(encoded[i : i + _HASH_SLICE]), crc)
    return crc.to_bytes(4, "little").hex()


_HASH_SLICE = 512


@dataclass(eq=False)
class Watcher:
    owner: Any  # the ServerConnection
    watcher_id: int
    namespace: str
    pattern: TopicsPattern
    topics: set[str] = field(default_factory=set)
    #: the topics UTF-8 encoded and sorted (byte order is code point order), kept for the hash
    _sorted: list[bytes] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self._sorted = sorted(t.encode() for t in self.topics)

    def add(self, topic: str) -> str:
        """Add a matching topic; the new topics hash (a sorted insert and one C-speed CRC)."""
        self.topics.add(topic)
        bisect.insort(self._sorted, topic.encode())
        return self.hash()

    def hash(self) -> str:
        return _hash_of_sorted(self._sorted)


class TopicWatchers:
    def __init__(self) -> None:
        self._by_owner: dict[Any, dict[int, Watcher]] = {}
        self._by_namespace: dict[str, dict[tuple[int, int], Watcher]] = {}

    def get(self, owner: Any, watcher_id: int) -> Watcher | None:
        return self._by_owner.get(owner, {}).get(watcher_id)

    def count(self, owner: Any) -> int:
        return len(self._by_owner.get(owner, ()))

    def add(self, watcher: Watcher) -> None:
        self.remove(watcher.owner, watcher.watcher_id)
        self._by_owner.setdefault(watcher.owner, {})[watcher.watcher_id] = watcher
        self._by_namespace.setdefault(watcher.namespace, {})[_key(watcher)] = watcher

    def remove(self, owner: Any, watcher_id: int | None = None) -> None:
        """Forget one watcher of ``owner``, or all of them when ``watcher_id`` is None."""
        mine = self._by_owner.get(owner)
        if not mine:
            return
        gone = list(mine.values()) if watcher_id is None else [w for w in [mine.get(watcher_id)] if w]
        for w in gone:
            del mine[w.watcher_id]
            same_ns = self._by_namespace[w.namespace]
            del same_ns[_key(w)]
            if not same_ns:
                del self._by_namespace[w.namespace]
        if not mine:
            del self._by_owner[owner]

    def watches(self, namespace: str) -> bool:
        """Whether some watcher watches ``namespace``."""
        return namespace in self._by_namespace

    def topic_created(self, topic: str) -> list[tuple[Watcher, str]]:
        """Watchers whose namespace and pattern match ``topic``, each with its new hash."""
        ns = TopicName.parse(topic).namespace_name
        out = []
        for w in list(self._by_namespace.get(ns, {}).values()):
            if topic not in w.topics and w.pattern.matches(topic):
                out.append((w, w.add(topic)))
        return out


def _key(w: Watcher) -> tuple[int, int]:
    return (id(w.owner), w.watcher_id)
