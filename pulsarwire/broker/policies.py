"""Tenants, namespaces, and the policies set on namespaces and topics (what Pulsar keeps as metadata).

In Pulsar a topic lives in a namespace of a tenant (``persistent://tenant/namespace/topic``) and
the namespace must exist before a producer or consumer can use the topic: otherwise the broker
answers TopicNotFound ("Tenant or namespace or topic does not exist"). A standalone Pulsar starts
with the namespace ``public/default``. :class:`Namespaces` starts with the namespaces it is given
(``--namespace TENANT/NS``; by default ``public/default``) and grows by :meth:`Namespaces.create`
(the broker's admin API); a tenant exists while one of its namespaces does. With a data
directory the names are kept in ``namespaces.json`` there (:func:`read_names`,
:func:`write_names`), so a namespace outlives the flag that created it, as in Pulsar's metadata
store.

Policies are set on a namespace or on a topic, each setting on its own (None: not set). For a
topic the topic's setting wins over its namespace's, which wins over the broker's default --
Pulsar's order of topic policies, namespace policies and broker configuration:

* ``deduplication`` -- Pulsar's ``deduplicationEnabled`` (broker: ``brokerDeduplicationEnabled``);
* ``schema_compatibility`` -- ``schemaCompatibilityStrategy`` (broker default FULL);
* ``retention`` -- ``retention_policies`` (:class:`Retention`): kept and answered by the admin API;
  this broker never deletes acknowledged messages by itself, so every retention is honoured.

Tenants exist while one of their namespaces does, or once created by :meth:`Namespaces.create_tenant`
(the admin REST API's ``PUT /admin/v2/tenants/{tenant}``). Permissions granted through the admin
API (Pulsar's ``auth_policies``: role -> actions on a namespace or a topic) are kept here too,
beside the broker's ``--grant`` flags. With a data directory those tenants, the permissions and
the policies set at run time are kept in ``policies.json`` there (:func:`read_state`,
:func:`write_state`); the broker's flags of a start win over kept policies of the same scope.

A partition has the policies of its partitioned topic (Pulsar keeps topic policies per
partitioned topic). A scope is written ``tenant/namespace`` or as a topic name of three parts
(``tenant/namespace/topic``, or with its ``persistent://`` domain): :func:`parse_scope`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pulsarwire.errors import InvalidTopicName, PulsarWireError
from pulsarwire.naming import TopicName

from .authz import Action, parse_auth_actions, split_namespace
from .schemas import Compatibility

#: The namespace a standalone Pulsar starts with.
DEFAULT_NAMESPACE = "public/default"
NAMES_FILE = "namespaces.json"
#: Tenants created on their own and the policies set at run time (the admin REST API).
STATE_FILE = "policies.json"
#: Topics whose effective policies are remembered (every SEND asks for its topic's).
EFFECTIVE_CACHE_SIZE = 10_000


class PolicySyntaxError(PulsarWireError, ValueError):
    """A namespace, scope or policy value that cannot be read."""


class NamespaceNotFound(PulsarWireError):
    """A namespace (or its tenant) that does not exist."""

    def __init__(self, namespace: str) -> None:
        super().__init__(f"namespace {namespace} does not exist")
        self.namespace = namespace


@dataclass(frozen=True, slots=True)
class Retention:
    """Pulsar's ``RetentionPolicies``: minutes and megabytes acknowledged messages are kept (-1: no limit)."""

    minutes: int = 0
    size_mb: int = 0


@dataclass(frozen=True, slots=True)
class Policies:
    """Settings of one namespace or topic; None = not set there (inherited)."""

    deduplication: bool | None = None
    schema_compatibility: Compatibility | None = None
    retention: Retention | None = None

    def over(self, base: Policies) -> Policies:
        """These settings where they are set, ``base``'s elsewhere."""
        return Policies(
            base.deduplication if self.deduplication is None else self.deduplication,
            base.schema_compatibility if self.schema_compatibility is None else self.schema_compatibility,
            base.retention if self.retention is None else self.retention,
        )


def check_namespace(namespace: str) -> str:
    """``namespace`` when it reads ``tenant/namespace`` with Pulsar's characters; raises PolicySyntaxError."""
    if split_namespace(namespace) is None:
        raise PolicySyntaxError(f"namespace {namespace!r} is not TENANT/NAMESPACE")
    return namespace


def parse_scope(text: str) -> str:
    """A namespace (``tenant/namespace``) or a topic's full name; raises PolicySyntaxError."""
    if "://" not in text and text.count("/") == 1:
        return check_namespace(text)
    if "/" not in text:
        raise PolicySyntaxError(f"scope {text!r} is neither TENANT/NAMESPACE nor TENANT/NAMESPACE/TOPIC")
    try:
        topic = TopicName.parse(text)
    except InvalidTopicName as exc:
        raise PolicySyntaxError(f"scope {text!r}: {exc}") from None
    check_namespace(topic.namespace_name)
    return str(topic.partitioned_topic)


def parse_switch(text: str) -> bool:
    """``on``/``off`` (also true/false, yes/no, enabled/disabled); raises PolicySyntaxError."""
    value = text.strip().lower()
    if value in ("on", "true", "yes", "enabled", "enable"):
        return True
    if value in ("off", "false", "no", "disabled", "disable"):
        return False
    raise PolicySyntaxError(f"{text!r} is neither on nor off")


class Namespaces:
    """The namespaces that exist and the policies of namespaces and topics."""

    def __init__(
        self,
        names: Iterable[str] = (DEFAULT_NAMESPACE,),
        policies: Mapping[str, Policies] | None = None,
        tenants: Iterable[str] = (),
        admins: Mapping[str, Iterable[str]] | None = None,
        permissions: Mapping[str, Mapping[str, tuple[str, ...]]] | None = None,
    ) -> None:
        self._names: set[str] = {check_namespace(n) for n in names}
        self._policies: dict[str, Policies] = {}
        self._effective: dict[tuple[str, Policies], Policies] = {}
        self._tenants: set[str] = set(tenants)
        #: Pulsar's TenantInfo.adminRoles of each tenant that has some
        self._admins: dict[str, frozenset[str]] = {}
        for tenant, roles in (admins or {}).items():
            self._tenants.add(tenant)
            self.set_admin_roles(tenant, roles)
        for scope, p in (policies or {}).items():
            self.set_policies(scope, p)
        #: permissions granted through the admin API (Pulsar's auth_policies): scope (a namespace
        #: "tenant/ns" or a topic's full name) -> role -> AuthAction names
        self._permissions: dict[str, dict[str, tuple[str, ...]]] = {
            scope: dict(roles) for scope, roles in (permissions or {}).items()
        }

    def __contains__(self, namespace: object) -> bool:
        return namespace in self._names

    def names(self) -> list[str]:
        return sorted(self._names)

    def create(self, namespace: str) -> bool:
        """Create ``namespace`` (and so its tenant); False when it existed. Raises PolicySyntaxError."""
        if check_namespace(namespace) in self._names:
            return False
        self._names.add(namespace)
        return True

    def tenants(self) -> list[str]:
        """The tenants that exist: those of the namespaces and those created on their own."""
        return sorted(self._tenants | {n.partition("/")[0] for n in self._names})

    def own_tenants(self) -> list[str]:
        """The tenants created on their own (:meth:`create_tenant`), with or without namespaces now."""
        return sorted(self._tenants)

    def has_tenant(self, tenant: str) -> bool:
        return tenant in self._tenants or any(n.partition("/")[0] == tenant for n in self._names)

    def create_tenant(self, tenant: str) -> bool:
        """Create ``tenant`` (False when it exists); raises PolicySyntaxError for a bad name."""
        check_namespace(f"{tenant}/x")
        if self.has_tenant(tenant):
            return False
        self._tenants.add(tenant)
        return True

    def admin_roles(self, tenant: str) -> list[str]:
        """The roles that administrate ``tenant`` (Pulsar's TenantInfo.adminRoles)."""
        return sorted(self._admins.get(tenant, ()))

    def set_admin_roles(self, tenant: str, roles: Iterable[str]) -> None:
        """Replace the admin roles of ``tenant`` (created when missing); raises PolicySyntaxError."""
        check_namespace(f"{tenant}/x")
        self._tenants.add(tenant)
        self._admins[tenant] = frozenset(roles)

    def is_admin(self, role: str | None, tenant: str) -> bool:
        """Whether ``role`` is one of the admin roles of ``tenant``."""
        return role is not None and role in self._admins.get(tenant, ())

    def delete(self, namespace: str) -> None:
        """Forget ``namespace`` with the policies and permissions of it and of its topics."""
        self._names.discard(namespace)
        for store in (self._policies, self._permissions):
            for scope in [k for k in store if _namespace_of(k) == namespace]:
                del store[scope]
        self._effective.clear()

    def delete_tenant(self, tenant: str) -> None:
        """Forget ``tenant`` (created on its own) and its admin roles; its namespaces are gone already."""
        self._tenants.discard(tenant)
        self._admins.pop(tenant, None)

    # -- permissions (Pulsar's auth_policies, granted through the admin API) -------------------
    def grant(self, scope: str, role: str, actions: tuple[str, ...]) -> None:
        """Give ``role`` ``actions`` on ``scope`` (a namespace, or a topic's full name), replacing
        what it had there, as Pulsar's grant-permission does."""
        self._permissions.setdefault(scope, {})[role] = actions

    def revoke(self, scope: str, role: str) -> bool:
        """Take every permission of ``role`` on ``scope`` away; False when it had none."""
        roles = self._permissions.get(scope, {})
        found = roles.pop(role, None) is not None
        if not roles:
            self._permissions.pop(scope, None)
        return found

    def permissions(self, scope: str) -> dict[str, tuple[str, ...]]:
        """The roles given permissions on ``scope`` itself and their actions."""
        return dict(self._permissions.get(scope, {}))

    def all_permissions(self) -> dict[str, dict[str, tuple[str, ...]]]:
        return {scope: dict(roles) for scope, roles in self._permissions.items()}

    def permits(self, role: str | None, namespace: str, target: str, needs: frozenset[Action]) -> bool:
        """Whether a permission granted on ``namespace`` or, when ``target`` is a topic, on that
        topic (a partition: on its partitioned topic) gives ``role`` one of ``needs``."""
        if role is None or not self._permissions:
            return False
        scopes = [namespace]
        if "://" in target:
            scopes.append(str(TopicName.parse(target).partitioned_topic))
        wanted = {a.value for a in needs}
        return any(wanted.intersection(self._permissions.get(scope, {}).get(role, ())) for scope in scopes)

    def require(self, namespace: str) -> None:
        """Raise NamespaceNotFound unless ``namespace`` exists."""
        if namespace not in self._names:
            raise NamespaceNotFound(namespace)

    def set_policies(self, scope: str, policies: Policies) -> None:
        """Set the policies of a namespace or topic (replacing earlier ones of that scope).

        Raises PolicySyntaxError for a bad scope, NamespaceNotFound when its namespace does not exist.
        """
        key = parse_scope(scope)
        self.require(key if "://" not in key else TopicName.parse(key).namespace_name)
        self._policies[key] = policies
        self._effective.clear()

    def scoped_policies(self) -> dict[str, Policies]:
        """Every scope's own policies (namespaces and topics)."""
        return dict(self._policies)

    def policies_of(self, scope: str) -> Policies:
        """The policies set on ``scope`` itself (nothing inherited)."""
        return self._policies.get(parse_scope(scope), Policies())

    def effective(self, topic: str, broker: Policies) -> Policies:
        """The policies that apply to ``topic``: its own, else its namespace's, else ``broker``'s."""
        found = self._effective.get((topic, broker))
        if found is None:
            name = TopicName.parse(topic)
            own = self._policies.get(str(name.partitioned_topic), Policies())
            namespace = self._policies.get(name.namespace_name, Policies())
            found = own.over(namespace.over(broker))
            if len(self._effective) >= EFFECTIVE_CACHE_SIZE:
                self._effective.clear()
            self._effective[(topic, broker)] = found
        return found


def read_names(data_dir: Path) -> list[str]:
    """The namespaces kept in ``data_dir`` (none when the file is missing or unreadable)."""
    try:
        names = json.loads((data_dir / NAMES_FILE).read_text())
    except (OSError, ValueError):
        return []
    return [n for n in names if isinstance(n, str) and split_namespace(n) is not None]


def write_names(data_dir: Path, names: Iterable[str]) -> None:
    """Keep ``names`` in ``data_dir`` (written whole, then renamed into place). Raises OSError."""
    path = data_dir / NAMES_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sorted(names)))
    os.replace(tmp, path)


def _policies_json(p: Policies) -> dict[str, object]:
    return {
        "deduplication": p.deduplication,
        "schema_compatibility": p.schema_compatibility.name if p.schema_compatibility else None,
        "retention": [p.retention.minutes, p.retention.size_mb] if p.retention else None,
    }


def _policies_from_json(d: dict[str, object]) -> Policies:
    dedup, strategy, retention = d.get("deduplication"), d.get("schema_compatibility"), d.get("retention")
    return Policies(
        dedup if isinstance(dedup, bool) else None,
        Compatibility.parse(strategy) if isinstance(strategy, str) else None,
        Retention(int(retention[0]), int(retention[1])) if isinstance(retention, list) else None,
    )


def _namespace_of(scope: str) -> str:
    return scope if "://" not in scope else TopicName.parse(scope).namespace_name


def read_state(
    data_dir: Path, namespaces: Iterable[str]
) -> tuple[list[str], dict[str, Policies], dict[str, list[str]], dict[str, dict[str, tuple[str, ...]]]]:
    """Tenants, policies, tenants' admin roles and permissions kept in ``data_dir`` (policies and
    permissions of ``namespaces`` and their topics only); nothing when the file is missing or
    unreadable, a bad entry is skipped."""
    try:
        state = json.loads((data_dir / STATE_FILE).read_text())
        tenants, stored = state.get("tenants", []), state.get("policies", {})
        admins_json = state.get("admin_roles", {})
        permissions_json = state.get("permissions", {})
    except (OSError, ValueError, AttributeError):
        return [], {}, {}, {}
    names = set(namespaces)
    policies: dict[str, Policies] = {}
    for scope, value in stored.items() if isinstance(stored, dict) else ():
        try:
            key = parse_scope(scope)
            namespace = key if "://" not in key else TopicName.parse(key).namespace_name
            if namespace in names and isinstance(value, dict):
                policies[key] = _policies_from_json(value)
        except (PolicySyntaxError, ValueError, TypeError, IndexError):
            continue
    good = [t for t in tenants if isinstance(t, str) and split_namespace(f"{t}/x") is not None]
    admins = {
        t: [r for r in roles if isinstance(r, str)]
        for t, roles in (admins_json.items() if isinstance(admins_json, dict) else ())
        if t in good and isinstance(roles, list)
    }
    permissions: dict[str, dict[str, tuple[str, ...]]] = {}
    for scope, roles in permissions_json.items() if isinstance(permissions_json, dict) else ():
        try:
            if _namespace_of(scope) in names and isinstance(roles, dict):
                permissions[scope] = {
                    str(role): parse_auth_actions(str(a) for a in actions)
                    for role, actions in roles.items()
                    if isinstance(actions, list)
                }
        except (PulsarWireError, ValueError, TypeError):
            continue
    return good, policies, admins, permissions


def write_state(data_dir: Path, namespaces: Namespaces) -> None:
    """Keep the tenants created on their own and every scope's policies in ``data_dir``. Raises OSError."""
    state = {
        "tenants": namespaces.own_tenants(),
        "admin_roles": {
            t: namespaces.admin_roles(t) for t in namespaces.own_tenants() if namespaces.admin_roles(t)
        },
        "policies": {k: _policies_json(p) for k, p in sorted(namespaces.scoped_policies().items())},
        "permissions": {
            scope: {role: list(actions) for role, actions in sorted(roles.items())}
            for scope, roles in sorted(namespaces.all_permissions().items())
        },
    }
    path = data_dir / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, path)
