"""Topic names: ``persistent://tenant/namespace/local`` and the short forms clients accept.

``my-topic`` means ``persistent://public/default/my-topic``; ``tenant/ns/topic``
means ``persistent://tenant/ns/topic``. A partition of a partitioned topic is
named ``<topic>-partition-<i>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pulsarwire.errors import InvalidTopicName

PARTITION_SUFFIX = "-partition-"
_PARTITION_RE = re.compile(r"^(.*)-partition-(\d+)$")


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a full or short topic name; raises InvalidTopicName."""
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in ("persistent", "non-persistent"):
                raise InvalidTopicName(f"invalid topic domain in {name!r}")
            parts = rest.split("/")
            if len(parts) != 3:
                raise InvalidTopicName(f"topic name {name!r} is not domain://tenant/namespace/topic")
        else:
            domain = "persistent"
            parts = name.split("/")
            if len(parts) == 1:
                parts = ["public", "default", parts[0]]
            elif len(parts) != 3:
                raise InvalidTopicName(f"topic name {name!r} must be 'topic' or 'tenant/namespace/topic'")
        if not all(parts):
            raise InvalidTopicName(f"topic name {name!r} has an empty part")
        return cls(domain, parts[0], parts[1], parts[2])

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def partition_index(self) -> int:
        m = _PARTITION_RE.match(self.local)
        return int(m.group(2)) if m else -1

    @property
    def partitioned_parent(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        m = _PARTITION_RE.match(self.local)
        return TopicName(self.domain, self.tenant, self.namespace, m.group(1)) if m else self

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}")
