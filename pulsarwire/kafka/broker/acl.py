"""ACL-style grants for the Kafka broker: who may do what to which topic, group, transactional id.

Kafka's model (``kafka.security.authorizer.AclAuthorizer`` / ``StandardAuthorizer``): a
principal (``User:alice``) is allowed an operation on a resource (type and name). Operations:
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE,
CLUSTER_ACTION, ALL; as in Kafka, READ, WRITE, DELETE or ALTER imply DESCRIBE, and ALTER_CONFIGS
implies DESCRIBE_CONFIGS. Resource types: TOPIC, GROUP, TRANSACTIONAL_ID, CLUSTER (one resource,
``kafka-cluster``).

A grant is written on the command line (``--grant``, repeatable) as::

    PRINCIPAL:RESOURCE_TYPE:NAME:OPERATIONS
    User:alice:topic:orders:read,write      alice may produce to and consume from "orders"
    User:alice:group:billing-*:read         ... and use every group whose name starts "billing-"
    User:*:topic:public:describe            everyone may see "public" in Metadata

``User:`` may be left out (``alice:topic:orders:read``). NAME is a literal name, ``*`` (every
resource of the type) or a prefix ending in ``*`` (Kafka's PREFIXED pattern); it cannot hold
``:``. ``--superuser User:admin`` (repeatable) may do everything (Kafka's ``super.users``).

Authorization is on as soon as one grant or superuser is given; then everything not granted is
denied (Kafka with ``allow.everyone.if.no.acl.found=false``), including to ``User:ANONYMOUS``,
the principal of a connection that did not authenticate. Without any, everyone may do everything.
:func:`attach` installs :meth:`Acl.allowed` as the broker's ``authorize`` hook, which the core's
and the group coordinator's handlers ask before each operation.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pulsarwire.errors import PulsarWireError

if TYPE_CHECKING:
    from pulsarwire.kafka.broker.context import RequestContext
    from pulsarwire.kafka.broker.state import BrokerState

OPERATIONS = frozenset(
    {
        "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE", "CLUSTER_ACTION", "ALL",
    }
)  # fmt: skip
RESOURCE_TYPES = frozenset({"TOPIC", "GROUP", "TRANSACTIONAL_ID", "CLUSTER"})
#: an operation -> the granted operations that also allow it (Kafka's implied operations)
IMPLIED_BY = {
    "DESCRIBE": frozenset({"DESCRIBE", "READ", "WRITE", "DELETE", "ALTER", "ALL"}),
    "DESCRIBE_CONFIGS": frozenset({"DESCRIBE_CONFIGS", "ALTER_CONFIGS", "ALL"}),
}
GRANT_SYNTAX = "PRINCIPAL:TYPE:NAME:OPERATIONS (e.g. User:alice:topic:orders:read,write)"
CLUSTER_NAME = "kafka-cluster"


class AclSyntaxError(PulsarWireError, ValueError):
    """A grant or superuser that does not read as documented (the message says what is wrong)."""


def principal_of(text: str) -> str:
    """``User:alice`` for ``alice`` or ``User:alice``."""
    return text if text.startswith("User:") else f"User:{text}"


@dataclass(frozen=True, slots=True)
class Grant:
    principal: str
    resource_type: str
    pattern: str
    operations: frozenset[str]

    @classmethod
    def parse(cls, spec: str) -> Grant:
        """Read ``PRINCIPAL:TYPE:NAME:OPERATIONS``; raises AclSyntaxError."""
        parts = spec.rsplit(":", 3)
        if len(parts) != 4 or not all(parts):
            raise AclSyntaxError(f"grant {spec!r} is not {GRANT_SYNTAX}")
        principal, rtype, name, ops = parts
        rtype = rtype.upper()
        if rtype not in RESOURCE_TYPES:
            types = "topic, group, transactional_id, cluster"
            raise AclSyntaxError(f"grant {spec!r}: unknown resource type {parts[1]!r} (use {types})")
        operations = frozenset(op.strip().upper() for op in ops.split(",") if op.strip())
        unknown = sorted(operations - OPERATIONS)
        if unknown or not operations:
            known = ", ".join(sorted(OPERATIONS)).lower()
            raise AclSyntaxError(
                f"grant {spec!r}: unknown operation {unknown[0] if unknown else ops!r} (use {known})"
            )
        if "*" in name[:-1]:
            raise AclSyntaxError(f"grant {spec!r}: '*' may only end a name (a prefix) or be the whole name")
        if principal == "User:" or principal.endswith(":"):
            raise AclSyntaxError(f"grant {spec!r} names no principal")
        return cls(principal_of(principal), rtype, name, operations)

    def matches(self, principal: str, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type or self.principal not in (principal, "User:*"):
            return False
        if self.pattern == "*" or self.pattern == name:
            return True
        return self.pattern.endswith("*") and name.startswith(self.pattern[:-1])


class Acl:
    """The broker's grants and superusers (see the module docstring)."""

    def __init__(self, grants: Iterable[Grant] = (), superusers: Iterable[str] = ()) -> None:
        self.grants = tuple(grants)
        self.superusers = frozenset(principal_of(s) for s in superusers)
        self.enabled = bool(self.grants or self.superusers)

    def allowed(self, principal: str, resource_type: str, name: str, operation: str) -> bool:
        if not self.enabled:
            return True
        principal = principal_of(principal)
        if principal in self.superusers:
            return True
        resource_type, operation = resource_type.upper(), operation.upper()
        if self._granted(principal, resource_type, name, operation):
            return True
        if resource_type == "CLUSTER" and operation == "IDEMPOTENT_WRITE":
            # Kafka (KIP-679): WRITE on any topic allows an idempotent producer
            return any(
                g.principal in (principal, "User:*")
                and g.resource_type == "TOPIC"
                and not g.operations.isdisjoint({"WRITE", "ALL"})
                for g in self.grants
            )
        if resource_type == "TOPIC" and operation == "CREATE":
            # CREATE on the cluster allows creating any topic
            return self._granted(principal, "CLUSTER", CLUSTER_NAME, "CREATE")
        return False

    def _granted(self, principal: str, resource_type: str, name: str, operation: str) -> bool:
        accepted = IMPLIED_BY.get(operation, frozenset({operation, "ALL"}))
        return any(
            g.matches(principal, resource_type, name) and not g.operations.isdisjoint(accepted)
            for g in self.grants
        )

    def authorize(self, ctx: RequestContext, operation: str, resource_type: str, name: str) -> bool:
        """The broker's ``authorize`` hook."""
        return self.allowed(ctx.principal, resource_type, name, operation)


# -- broker plugin -------------------------------------------------------------------------------


def _grant(spec: str) -> Grant:
    try:
        return Grant.parse(spec)
    except AclSyntaxError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("authorization (ACLs)")
    group.add_argument(
        "--grant",
        type=_grant,
        action="append",
        default=[],
        metavar="GRANT",
        help=f"allow {GRANT_SYNTAX}; NAME may be * or end in * (a prefix); repeatable."
        " With any --grant or --superuser, whatever is not granted is denied",
    )
    group.add_argument(
        "--superuser",
        action="append",
        default=[],
        metavar="PRINCIPAL",
        help="a principal (User:admin) allowed everything; repeatable",
    )


def attach(state: BrokerState) -> None:
    """Install the grants (``grant`` / ``superuser`` in the config's extra) as ``authorize``."""
    extra = state.config.extra
    grants = [g if isinstance(g, Grant) else Grant.parse(str(g)) for g in extra.get("grant") or ()]
    acl = Acl(grants, extra.get("superuser") or ())
    state.extensions["acl"] = acl
    if acl.enabled:
        state.authorize = acl.authorize
