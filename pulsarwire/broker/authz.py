"""Authorization: which role may produce to / consume from which namespaces (Pulsar's grants).

A :class:`Grants` value holds the broker's grants and superuser roles. A grant gives a role
actions (``produce``, ``consume``) on a scope: one namespace (``tenant/namespace``), every
namespace of a tenant (``tenant/*``) or every namespace (``*``). Superusers may do everything.

Each topic command needs one of a set of actions, as Apache Pulsar's authorization provider
decides (``PulsarAuthorizationProvider.allowTopicOperationAsync`` /
``allowNamespaceOperationAsync``):

* :data:`LOOKUP` — produce *or* consume (``canLookup``): PARTITIONED_METADATA, LOOKUP, GET_SCHEMA
  (TopicOperation GET_METADATA), and the namespace's topic list (NamespaceOperation GET_TOPICS:
  GET_TOPICS_OF_NAMESPACE, WATCH_TOPIC_LIST);
* :data:`PRODUCE` — produce: PRODUCER, GET_OR_CREATE_SCHEMA (as Pulsar's schema upload);
* :data:`CONSUME` — consume: SUBSCRIBE, SEEK (RESET_CURSOR), UNSUBSCRIBE, GET_LAST_MESSAGE_ID.

The broker only consults grants when authentication is on; then a role without a grant may
do nothing (Pulsar with ``authorizationEnabled``). Grants are written on the command line as
``ROLE:SCOPE:ACTIONS`` (``alice:public/default:produce,consume``), parsed by :meth:`Grant.parse`.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pulsarwire.errors import PulsarWireError


class Action(enum.Enum):
    PRODUCE = "produce"
    CONSUME = "consume"


#: Produce or consume: Pulsar's ``canLookup`` (topic metadata, schemas, the namespace's topic list).
LOOKUP = frozenset({Action.PRODUCE, Action.CONSUME})
PRODUCE = frozenset({Action.PRODUCE})
CONSUME = frozenset({Action.CONSUME})

#: Tenant and namespace names as Pulsar accepts them (``NamedEntity``: letters, digits, ``-_=:.``).
_NAME = re.compile(r"[\w\-=:.]+")
GRANT_SYNTAX = "ROLE:TENANT/NAMESPACE:ACTIONS (e.g. alice:public/default:produce,consume)"


class GrantSyntaxError(PulsarWireError, ValueError):
    """A grant that does not read ``ROLE:TENANT/NAMESPACE|TENANT/*|*:produce,consume``."""


def split_namespace(namespace: str) -> tuple[str, str] | None:
    """``(tenant, namespace)`` of ``"tenant/namespace"``; None for anything else."""
    tenant, sep, local = namespace.partition("/")
    if not sep or not _NAME.fullmatch(tenant) or not _NAME.fullmatch(local):
        return None
    return tenant, local


#: Pulsar's AuthAction values in its enum's order: a permission granted through the admin API may
#: name any (this broker has services only for produce and consume; the others grant nothing here)
AUTH_ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


def parse_auth_actions(names: Iterable[str]) -> tuple[str, ...]:
    """The AuthAction names of a permission (in Pulsar's order); raises GrantSyntaxError for a name
    that is not one (Pulsar stores it as null)."""
    found = set()
    for name in names:
        if name not in AUTH_ACTIONS:
            raise GrantSyntaxError(f"unknown action {name!r} (Pulsar's are {', '.join(AUTH_ACTIONS)})")
        found.add(name)
    return tuple(a for a in AUTH_ACTIONS if a in found)


def parse_actions(names: Iterable[str]) -> frozenset[Action]:
    """The actions named (``produce``, ``consume``: Pulsar's AuthAction values this broker has);
    raises GrantSyntaxError for another name."""
    known = {a.value: a for a in Action}
    found = set()
    for name in names:
        if name not in known:
            raise GrantSyntaxError(f"unknown action {name!r} (use produce, consume)")
        found.add(known[name])
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class Grant:
    """``actions`` on ``scope`` ("tenant/namespace", "tenant/*" or "*") for ``role``."""

    role: str
    scope: str
    actions: frozenset[Action]

    def __post_init__(self) -> None:
        if not self.role:
            raise GrantSyntaxError("a grant needs a role")
        if not self.actions:
            raise GrantSyntaxError(f"the grant for {self.role!r} names no action (produce, consume)")
        tenant, sep, local = self.scope.partition("/")
        if self.scope != "*" and not (
            sep and _NAME.fullmatch(tenant) and (local == "*" or _NAME.fullmatch(local))
        ):
            raise GrantSyntaxError(f"scope {self.scope!r} is not TENANT/NAMESPACE, TENANT/* or *")

    @classmethod
    def parse(cls, spec: str) -> Grant:
        """Read ``ROLE:SCOPE:ACTIONS`` (the role may itself contain ``:``); raises GrantSyntaxError."""
        parts = spec.rsplit(":", 2)
        if len(parts) != 3:
            raise GrantSyntaxError(f"grant {spec!r} is not {GRANT_SYNTAX}")
        role, scope, actions = parts
        try:
            return cls(role, scope, parse_actions(a.strip() for a in actions.split(",") if a.strip()))
        except GrantSyntaxError as exc:
            raise GrantSyntaxError(f"grant {spec!r}: {exc}") from None

    def covers(self, tenant: str, namespace: str) -> bool:
        return self.scope in ("*", f"{tenant}/*", f"{tenant}/{namespace}")


@dataclass(frozen=True, slots=True)
class Grants:
    """The broker's grants and superusers; ``Grants()`` grants nothing to anyone."""

    grants: tuple[Grant, ...] = ()
    superusers: frozenset[str] = frozenset()
    _by_role: Mapping[str, tuple[Grant, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_role: dict[str, tuple[Grant, ...]] = {}
        for g in self.grants:
            by_role[g.role] = (*by_role.get(g.role, ()), g)
        object.__setattr__(self, "_by_role", by_role)

    @classmethod
    def of(cls, *specs: str, superusers: Iterable[str] = ()) -> Grants:
        """Grants from ``ROLE:SCOPE:ACTIONS`` strings; raises GrantSyntaxError."""
        return cls(tuple(Grant.parse(s) for s in specs), frozenset(superusers))

    def allows(self, role: str | None, namespace: str, needs: frozenset[Action]) -> bool:
        """Whether ``role`` holds one of the actions ``needs`` on ``namespace`` ("tenant/namespace")."""
        if role is None:
            return False
        if role in self.superusers:
            return True
        parts = split_namespace(namespace)
        if parts is None:  # not a namespace: nothing to grant on
            return False
        return any(g.actions & needs and g.covers(*parts) for g in self._by_role.get(role, ()))

    def __bool__(self) -> bool:
        return bool(self.grants or self.superusers)
