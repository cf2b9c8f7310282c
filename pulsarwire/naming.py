"""Topic names: the value type every part of pulsarwire (client, broker) and its users share.

A full topic name reads ``domain://tenant/namespace/local-name``, the domain being
``persistent`` or ``non-persistent``. Clients also accept two short forms, as Pulsar's do:
``my-topic`` is ``persistent://public/default/my-topic`` and ``tenant/ns/my-topic`` is
``persistent://tenant/ns/my-topic``. Pulsar's legacy names with a cluster
(``persistent://tenant/cluster/ns/topic``) are not supported: they are refused like any other
malformed name, with :class:`~pulsarwire.errors.InvalidTopicName`.

A partition of a partitioned topic is a topic of its own named ``<topic>-partition-<i>``.
As in Pulsar, the index is what follows the *last* ``-partition-`` of the name and counts only
when it is a plain decimal number (``0``, ``12``; not ``01``, ``-1``, ``+1``, nor beyond 32 bits):
``orders-partition-01`` is an ordinary topic, not partition 1 of ``orders``.

``str(TopicName.parse(name))`` is the full name; parsing a full name and printing it gives it back
unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote

from pulsarwire.errors import InvalidTopicName

PERSISTENT = "persistent"
NON_PERSISTENT = "non-persistent"
DOMAINS = (PERSISTENT, NON_PERSISTENT)
#: where a short name with only the topic's own name lives
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
#: between a partitioned topic's name and a partition's index
PARTITION_SUFFIX = "-partition-"
_INDEX = re.compile(r"0|[1-9][0-9]*")
_MAX_INDEX = 2**31 - 1  # Pulsar's partition index is a Java int


@dataclass(frozen=True, slots=True)
class TopicName:
    """A topic's full name, split into its parts; build one with :meth:`parse`.

    Raises InvalidTopicName when built from parts that do not make a topic name
    (an unknown domain, an empty part, a ``/`` inside a part).
    """

    domain: str
    tenant: str
    namespace: str
    local_name: str

    def __post_init__(self) -> None:
        if self.domain not in DOMAINS:
            raise InvalidTopicName(f"topic domain {self.domain!r} is not persistent or non-persistent")
        for what, part in (("tenant", self.tenant), ("namespace", self.namespace), ("name", self.local_name)):
            if not part:
                raise InvalidTopicName(f"topic {what} is empty")
            if "/" in part:
                raise InvalidTopicName(f"topic {what} {part!r} contains '/'")

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """A full (``persistent://t/ns/x``) or short (``x``, ``t/ns/x``) topic name.

        Raises InvalidTopicName for anything else: an unknown domain, two parts or more than
        three, an empty part, a legacy name with a cluster.
        """
        if "://" in name:
            domain, _, rest = name.partition("://")
            if domain not in DOMAINS:
                raise InvalidTopicName(
                    f"topic {name!r}: domain {domain!r} is not persistent or non-persistent"
                )
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicName(f"topic {name!r} is not domain://tenant/namespace/topic")
        else:
            domain = PERSISTENT
            parts = name.split("/")
            if len(parts) == 1:
                parts = [DEFAULT_TENANT, DEFAULT_NAMESPACE, name]
            elif len(parts) != 3:
                raise InvalidTopicName(f"topic {name!r} is neither 'topic' nor 'tenant/namespace/topic'")
        if not all(parts):
            raise InvalidTopicName(f"topic {name!r} has an empty part")
        return cls(domain, parts[0], parts[1], parts[2])

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def rest_path(self) -> str:
        """``domain/tenant/namespace/local-name`` as the web service's URLs take it (the parts
        percent-encoded, a ``/`` too): ``persistent://t/ns/x`` → ``persistent/t/ns/x``."""
        return "/".join(
            quote(part, safe="") for part in (self.domain, self.tenant, self.namespace, self.local_name)
        )

    @property
    def is_persistent(self) -> bool:
        return self.domain == PERSISTENT

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The index of this partition of a partitioned topic; -1 when the name is not a partition's."""
        head, sep, index = self.local_name.rpartition(PARTITION_SUFFIX)
        if not sep or not head or not _INDEX.fullmatch(index):
            return -1
        value = int(index)
        return value if value <= _MAX_INDEX else -1

    @property
    def is_partition(self) -> bool:
        return self.partition_index >= 0

    @property
    def partitioned_topic(self) -> TopicName:
        """The partitioned topic this partition belongs to; the name itself when it is no partition."""
        if not self.is_partition:
            return self
        base = self.local_name.rpartition(PARTITION_SUFFIX)[0]
        return TopicName(self.domain, self.tenant, self.namespace, base)

    def partition(self, index: int) -> TopicName:
        """Partition ``index`` of this topic (-1: the topic itself, as Pulsar's ``getPartition``;
        so is a name that already is partition ``index``). Raises InvalidTopicName for an index
        below -1 or beyond 32 bits."""
        if not -1 <= index <= _MAX_INDEX:
            raise InvalidTopicName(f"partition index {index} of {self} is not 0..{_MAX_INDEX}")
        if index == -1 or self.partition_index == index:
            return self
        return TopicName(
            self.domain, self.tenant, self.namespace, f"{self.local_name}{PARTITION_SUFFIX}{index}"
        )

    def partitions(self, count: int) -> list[TopicName]:
        """The ``count`` partitions of this topic; ``[self]`` for 0 (a topic that is not partitioned)."""
        return [self.partition(i) for i in range(count)] if count else [self]
