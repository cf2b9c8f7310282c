"""The broker's service layer: topics, namespaces and tenants, policies, lookup and authorization.

Apache Pulsar keeps these rules in services (``BrokerService``, ``NamespaceService``,
``AuthorizationService``, ``TopicLookupBase``) that its binary connection handler (``ServerCnx``)
and its HTTP resources (``PersistentTopicsBase``...) both call. :class:`BrokerService` is that
layer here: the binary connections (connection.py) and the web service (web.py) call it and
know nothing of each other. Each question both transports ask is answered by one method:

* :meth:`BrokerService.authorize` -- may this role do these actions on this namespace;
* :meth:`BrokerService.require_namespace` -- does the topic's tenant and namespace exist;
* :meth:`BrokerService.partitioned_metadata` -- how many partitions (creating the metadata
  only when the asker and the broker both allow it, else a missing topic is not found);
* :meth:`BrokerService.lookup` -- which broker serves the topic, at which URLs;
* :meth:`BrokerService.topic_exists` -- a loaded topic, a stored one, a partitioned topic or a
  partition of one.

A refusal is a :class:`BrokerError` carrying the protocol's ServerError code; the binary
handler sends the code, the web service maps it to an HTTP status. :class:`NotFound` says in
addition what was missing (tenant, namespace, topic...), for the web's Pulsar-worded reasons.

How it runs: every method here runs on the broker's event loop and is not thread-safe. Other
threads go through :meth:`Broker.call <pulsarwire.broker.server.Broker.call>`, which runs one
of these methods on the loop and returns its result -- the one style of every admin call.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, cast

from pulsarwire.errors import PulsarWireError
from pulsarwire.naming import PARTITION_SUFFIX, TopicName
from pulsarwire.proto import pb

from .authz import AUTH_ACTIONS, LOOKUP, Action, GrantSyntaxError, parse_auth_actions, split_namespace
from .compaction import CompactionStatus
from .config import BrokerConfig, Listener
from .faults import Faults
from .net import advertised_host
from .policies import Namespaces, Policies, read_names, read_state, write_names, write_state
from .schemas import Compatibility, SchemaRegistry
from .storage import Entry, EntryCache, OpenFiles, TopicLog, stored_topics, topic_dir
from .subscription import EARLIEST, Position, Subscription
from .topic import Topic, note_sequence
from .watch import TopicWatchers

log = logging.getLogger("pulsarwire.broker")

E = pb.ServerError
Mode = pb.CommandGetTopicsOfNamespace.Mode
SubType = pb.CommandSubscribe.SubType
#: Topic domains GET_TOPICS_OF_NAMESPACE lists for each mode.
_DOMAINS_OF_MODE: dict[int, tuple[str, ...]] = {
    Mode.PERSISTENT: ("persistent",),
    Mode.NON_PERSISTENT: ("non-persistent",),
    Mode.ALL: ("persistent", "non-persistent"),
}
#: seconds between attempts to save cursors after a write failed (disk full, read-only...)
RETRY_WRITE_SECONDS = 5.0
#: Largest partition count: Pulsar's PartitionedTopicMetadata.partitions is a Java int.
MAX_INT32 = 2**31 - 1
#: partitions announced to topic-list watchers between two yields to the loop
ANNOUNCE_CHUNK = 1000
#: Marks what only a superuser or an admin role of the namespace's tenant may do (a superuser
#: only when no namespace is named: tenants, the broker's health).
SUPERUSER: frozenset[Action] = frozenset()
#: Most partitions an admin call visits one by one (create a subscription on each, list each in
#: partitioned stats): beyond, the call is refused or lists only the partitions that hold
#: anything, so that one request never walks 2**31-1 partitions on the broker's loop.
MAX_PARTITIONS_VISITED = 10_000
#: Pulsar's MessageId.latest: (Long.MAX_VALUE, Long.MAX_VALUE)
LATEST: Position = (2**63 - 1, 2**63 - 1)


class BrokerError(PulsarWireError):
    """A request the broker refuses; carries the protocol ServerError code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class InvalidPartitions(PulsarWireError, ValueError):
    """A partition count Pulsar refuses (not above 0, not a 32-bit int, above the broker's maximum)."""


def check_partitions(partitions: int, most: int) -> None:
    """Refuse (:class:`InvalidPartitions`) a partition count Pulsar refuses: not a 32-bit int
    above 0, or above ``most`` when that is above 0 (Pulsar's maxNumPartitionsPerPartitionedTopic)."""
    if not 0 < partitions <= MAX_INT32:
        raise InvalidPartitions("Number of partitions should be more than 0 and a 32-bit integer")
    if most > 0 and partitions > most:
        raise InvalidPartitions(f"Number of partitions should be less than or equal to {most}")


class NotFound(BrokerError):
    """TopicNotFound, saying what is missing: ``tenant``, ``namespace``, ``topic``, ``partitioned topic``."""

    def __init__(self, what: str, message: str) -> None:
        super().__init__(E.TopicNotFound, message)
        self.what = what


class InUse(BrokerError):
    """A deletion or change refused because what it names is in use (Pulsar's 409 Conflict)."""

    def __init__(self, message: str) -> None:
        super().__init__(E.NotAllowedError, message)


class Unsupported(BrokerError):
    """A request this kind of topic cannot serve, as Pulsar refuses it with 400 Bad Request."""

    def __init__(self, message: str) -> None:
        super().__init__(E.NotAllowedError, message)


class PreconditionFailed(BrokerError):
    """A request whose precondition does not hold (Pulsar's 412 Precondition Failed): what it
    needs does not exist and may not be created, there is nothing to examine..."""

    def __init__(self, message: str) -> None:
        super().__init__(E.TopicNotFound, message)


class Urls(Protocol):
    """Where this broker answers (known once it listens): the broker that owns the service."""

    @property
    def port(self) -> int: ...

    @property
    def service_url(self) -> str: ...

    @property
    def service_url_tls(self) -> str | None: ...

    @property
    def http_url(self) -> str | None: ...

    @property
    def http_url_tls(self) -> str | None: ...


class Connection(Protocol):
    """What the service asks of a client connection (the binary handler implements it)."""

    def uses_topic(self, name: str) -> bool: ...

    def close_topic_producers(self, name: str) -> None: ...

    def close_topic_consumers(self, name: str) -> None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Lookup:
    """The answer to a lookup: the owner's URLs, and whether the asker is sent to another broker."""

    urls: Listener
    http_url: str
    http_url_tls: str
    redirect: bool


@dataclass(frozen=True, slots=True)
class LastMessageId:
    """A topic's last message id: its last position (``entry_id`` -1 when it holds no entry: the
    current ledger's, as Pulsar's managed ledger says), ``batch_index`` -1 unless the last entry
    is a batch (then its last index); ``written``: whether anything was ever stored."""

    ledger_id: int
    entry_id: int
    partition: int
    batch_index: int = -1
    written: bool = True


class BrokerService:
    """One broker's topics, metadata and rules; see the module docstring."""

    def __init__(self, config: BrokerConfig, urls: Urls) -> None:
        self.config = config
        self.urls = urls
        self.entry_cache = EntryCache(config.entry_cache_size)
        self.open_files = OpenFiles(config.max_open_logs)
        self.topics: dict[str, Topic] = {}
        self.partitioned: dict[str, int] = {}
        self.connections: set[Connection] = set()
        self.name = "standalone"
        #: set by Cluster: who owns which topic
        self.cluster: Any = None
        self.faults = Faults()
        self.watchers = TopicWatchers()
        #: the event loop the service runs on (set when the broker starts)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._producer_names = itertools.count()
        self._boot_id = secrets.token_hex(3)
        self._flush_handle: asyncio.TimerHandle | None = None
        self._dirty_topics: set[Topic] = set()
        self._advertised_host: str | None = None
        #: background work on the loop (compactions, liveness checks): held here, as asyncio keeps
        #: only weak references to tasks, and cancelled at stop
        self._tasks: set[asyncio.Task[Any]] = set()
        # counters visible to tests, --stats and /metrics
        self.connections_accepted = 0
        self.lookups_redirected = 0
        self.auth_refreshes = 0
        self.auth_failures = 0
        self.connections_refused = 0
        self.corrupt_acks = 0
        self.write_failures = 0
        self.load_metadata()

    # -- metadata ----------------------------------------------------------------
    def reset(self) -> None:
        """Forget everything not on disk (a restart) and read the metadata again."""
        self.topics = {}
        self.partitioned = {}
        self._dirty_topics = set()
        self._boot_id = secrets.token_hex(3)
        self.load_metadata()

    def _meta_path(self) -> Path | None:
        return self.config.data_dir / "partitioned.json" if self.config.data_dir else None

    def load_metadata(self) -> None:
        cfg = self.config
        self.schemas = SchemaRegistry(cfg.data_dir, max_schema_size=cfg.max_schema_size, fsync=cfg.fsync)
        path = self._meta_path()
        if path is not None and path.exists():
            self.partitioned = {k: int(v) for k, v in json.loads(path.read_text()).items()}
        if self.cluster is None:  # a cluster's brokers share one registry (Cluster sets it)
            names = [*cfg.namespaces, *(read_names(cfg.data_dir) if cfg.data_dir is not None else [])]
            tenants, kept, admins, permissions = (
                read_state(cfg.data_dir, names) if cfg.data_dir is not None else ([], {}, {}, {})
            )
            # Policies and tenants set at run time (admin REST API) are kept; the flags of this start
            # win over them.
            self.namespaces = Namespaces(
                names,
                {**kept, **cfg.policies},
                tenants,
                {**admins, **{t: list(r) for t, r in cfg.tenants.items()}},
                permissions,
            )

    def keep_namespaces(self) -> None:
        """Write the namespaces into the data dir when it does not hold them all yet."""
        data_dir = self.config.data_dir
        if data_dir is not None and set(read_names(data_dir)) != set(self.namespaces.names()):
            write_names(data_dir, self.namespaces.names())

    def keep_policies(self) -> None:
        """Write the tenants and policies set at run time into the data dir, if any. Raises OSError."""
        if self.config.data_dir is not None:
            write_state(self.config.data_dir, self.namespaces)

    def _save_metadata(self) -> None:
        path = self._meta_path()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.partitioned))
            tmp.replace(path)

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (LOOKUP answers, service_url)."""
        if self._advertised_host is None:
            self._advertised_host = advertised_host(self.config.host, self.config.advertised_address)
        return self._advertised_host

    # -- the rules both transports ask -------------------------------------------------
    def authorize(
        self, role: str | None, namespace: str, needs: frozenset[Action], target: str = "", what: str = ""
    ) -> None:
        """Refuse unless ``role`` may do one of ``needs`` on ``namespace`` ("tenant/ns"; "": the
        broker itself), as Pulsar's PulsarAuthorizationProvider decides.

        Nothing is checked without authentication. With it: a superuser may do everything; on a
        namespace whose tenant does not exist anyone else gets :class:`NotFound` (``tenant``:
        Pulsar's validateTenantAdminAccess answers "Tenant does not exist" before any grant is
        read); the tenant's admin roles may do everything in it; other roles need a grant of one
        of ``needs`` (:data:`SUPERUSER`: nothing else suffices): one of the broker's ``--grant``
        flags, or a permission granted through the admin API on the namespace or, when ``target``
        is a topic, on that topic (Pulsar's ``auth_policies``). A refusal is BrokerError
        AuthorizationError, worded with ``what`` (default: the actions) and ``target``.
        """
        if self.config.auth is None:
            return
        grants = self.config.grants
        if role is not None and role in grants.superusers:
            return
        tenant, sep, _local = namespace.partition("/")
        if sep and split_namespace(f"{tenant}/x") is not None:  # "tenant/ns", or "tenant/" for the tenant
            if not self.namespaces.has_tenant(tenant):
                raise NotFound("tenant", f"Tenant or namespace or topic does not exist: {namespace}")
            if self.namespaces.is_admin(role, tenant):
                return
        if needs is SUPERUSER or not (
            grants.allows(role, namespace, needs) or self.namespaces.permits(role, namespace, target, needs)
        ):
            raise self.refusal(role, namespace, needs, target, what)

    def refusal(
        self, role: str | None, namespace: str, needs: frozenset[Action], target: str = "", what: str = ""
    ) -> BrokerError:
        """The AuthorizationError :meth:`authorize` raises (logged at INFO)."""
        what = what or " or ".join(sorted(a.value for a in needs))
        where = f" on {target}" if target else ""
        log.info("role %r is not authorized to %s on %s", role, what, target or namespace)
        return BrokerError(E.AuthorizationError, f"role {role!r} is not authorized to {what}{where}")

    def authorize_topic(self, role: str | None, name: str, needs: frozenset[Action]) -> None:
        """:meth:`authorize` on the namespace of topic ``name``, naming the topic in a refusal."""
        self.authorize(role, TopicName.parse(name).namespace_name, needs, name)

    def require_namespace(self, namespace: str) -> None:
        """Refuse (:class:`NotFound`, TopicNotFound) a namespace ("tenant/ns") that does not exist.

        Asked after authorization, as Pulsar: a role learns whether a tenant exists (Pulsar's
        "Tenant does not exist"), and about a namespace only where it may act.
        """
        if namespace not in self.namespaces:
            tenant = namespace.partition("/")[0]
            what = "namespace" if self.namespaces.has_tenant(tenant) else "tenant"
            raise NotFound(what, f"Tenant or namespace or topic does not exist: {namespace}")

    def partitioned_metadata(self, name: str, role: str | None, *, auto_create: bool) -> int:
        """The partitions of topic ``name`` (0: not partitioned), as Pulsar answers both
        PARTITIONED_METADATA and ``GET .../partitions``.

        Authorized as a lookup; the namespace must exist. The metadata is created (the broker's
        default partitions) only when the asker allows it (``metadata_auto_creation_enabled``,
        ``checkAllowAutoCreation``) and the broker auto-creates topics; otherwise a topic that
        does not exist is :class:`NotFound` (Pulsar's ServerCnx.handlePartitionMetadataRequest
        and PersistentTopicsBase.internalGetPartitionedMetadataAsync).
        """
        self.authorize_topic(role, name, LOOKUP)
        self.require_namespace(TopicName.parse(name).namespace_name)
        create = auto_create and self.config.allow_auto_topic_creation
        n = self.partitions_of(name, create=create)
        if n == 0 and not create and not self.topic_exists(name):
            raise NotFound("topic", f"Topic {name} not found")
        return n

    def lookup(self, name: str, role: str | None, listener: str | None, *, http: bool = False) -> Lookup:
        """Which broker serves topic ``name`` and at which URLs (LOOKUP and ``/lookup/v2/topic``).

        Authorized as a lookup; the namespace must exist; ``listener`` names an advertised
        listener (None: the internal one). As Pulsar's binary lookup, the topic itself need not
        exist yet (creating a producer or consumer decides that); as Pulsar's HTTP lookup
        (``http``: TopicLookupBase), a persistent topic that does not exist and may not be
        auto-created is :class:`NotFound` ("Topic not found ...").
        """
        self.authorize_topic(role, name, LOOKUP)
        self.require_namespace(TopicName.parse(name).namespace_name)
        if (
            http
            and name.startswith("persistent://")
            and not self.config.allow_auto_topic_creation
            and not self.topic_exists(name)
        ):
            raise NotFound("topic", f"Topic not found {name}")
        owner = self.cluster.owner_of(name).service if self.cluster is not None else self
        redirect = owner is not self
        if redirect:
            self.lookups_redirected += 1
        urls = owner.urls
        return Lookup(owner.listener(listener), urls.http_url or "", urls.http_url_tls or "", redirect)

    def topic_for_use(self, topic: str, role: str | None, needs: frozenset[Action]) -> Topic:
        """The topic a producer or consumer is created on: authorized, in a namespace that exists,
        served here, not a partitioned topic itself, existing or auto-created."""
        name = str(TopicName.parse(topic))
        self.authorize_topic(role, name, needs)
        self.require_namespace(TopicName.parse(name).namespace_name)
        if not self.owns(name):
            raise BrokerError(E.ServiceNotReady, f"topic {name} is not served by {self.name}")
        if name in self.partitioned:
            raise BrokerError(E.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        if not self.config.allow_auto_topic_creation and not self.topic_exists(name):
            raise NotFound("topic", f"topic {name} does not exist")
        found = self.get_topic(name, create=True)
        assert found is not None
        return found

    def topic_exists(self, name: str) -> bool:
        """Whether topic ``name`` exists: loaded, stored in the data dir, a partitioned topic, or a
        partition of one (Pulsar creates the partitions with the partitioned topic)."""
        if name in self.topics or name in self.partitioned:
            return True
        tn = TopicName.parse(name)
        if 0 <= tn.partition_index < self.partitioned.get(str(tn.partitioned_topic), 0):
            return True
        return self.config.data_dir is not None and topic_dir(self.config.data_dir, name).exists()

    def existing_topic(self, topic: str) -> Topic:
        """The non-partitioned topic ``topic``, loaded; BrokerError NotAllowedError for a
        partitioned topic, :class:`NotFound` when it does not exist."""
        name = str(TopicName.parse(topic))
        if name in self.partitioned:
            raise BrokerError(E.NotAllowedError, f"{name} is a partitioned topic: use its partitions")
        if not self.topic_exists(name):
            raise NotFound("topic", f"Topic {name} not found")
        found = self.get_topic(name, create=True)
        assert found is not None
        return found

    def owns(self, name: str) -> bool:
        return self.cluster is None or self.cluster.owner_of(name).service is self

    def listener(self, name: str | None) -> Listener:
        """The URLs a LOOKUP for listener ``name`` is answered with (None: the internal listener).

        Raises BrokerError ServiceNotReady for a listener this broker does not advertise, as Pulsar.
        """
        cfg = self.config
        internal = cfg.internal_listener_name
        given = cfg.advertised_listeners.get(name or internal)
        if name and name != internal:
            if given is None:
                raise BrokerError(E.ServiceNotReady, f"the broker do not have {name} listener")
            return given
        # The internal listener: the URLs given for it, this broker's own for the others (Pulsar
        # fills them in from its ports).
        given = given or Listener()
        return Listener(given.url or self.urls.service_url, given.url_tls or self.urls.service_url_tls)

    # -- tenants, namespaces, policies ----------------------------------------------------
    def create_namespace(self, namespace: str) -> bool:
        """Create ``tenant/namespace`` (False when it exists); raises PolicySyntaxError for a bad name,
        OSError when the data dir cannot keep it."""
        created = self.namespaces.create(namespace)
        if created:
            self.keep_namespaces()
        return created

    def create_tenant(self, tenant: str, admin_roles: Iterable[str] = ()) -> bool:
        """Create ``tenant`` with its admin roles (False when it exists); raises PolicySyntaxError,
        OSError when the data dir cannot keep it."""
        created = self.namespaces.create_tenant(tenant)
        if created:
            self.namespaces.set_admin_roles(tenant, admin_roles)
            self.keep_policies()
        return created

    def set_tenant_admins(self, tenant: str, admin_roles: Iterable[str]) -> None:
        """Replace the admin roles of ``tenant`` (Pulsar's POST /admin/v2/tenants/{tenant})."""
        self.namespaces.set_admin_roles(tenant, admin_roles)
        self.keep_policies()

    def delete_tenant(self, tenant: str) -> None:
        """Delete ``tenant`` (Pulsar's DELETE /admin/v2/tenants/{tenant}): :class:`NotFound` when it
        does not exist, :class:`InUse` ("The tenant still has active namespaces") while a
        namespace of it does. Raises OSError when the data dir cannot keep it. A tenant named by a
        ``--tenant`` flag comes back at the next start, as a namespace of ``--namespace`` does."""
        if not self.namespaces.has_tenant(tenant):
            raise NotFound("tenant", "Tenant doesn't exist")
        if any(n.partition("/")[0] == tenant for n in self.namespaces.names()):
            raise InUse("The tenant still has active namespaces")
        self.namespaces.delete_tenant(tenant)
        self.keep_policies()

    def delete_namespace(self, namespace: str, *, force: bool) -> None:
        """Delete ``namespace`` with its policies and permissions (Pulsar's DELETE
        /admin/v2/namespaces/{tenant}/{namespace}): :class:`NotFound` when it does not exist,
        :class:`InUse` while it has topics ("Cannot delete non empty namespace"); ``force`` is
        NotAllowedError, as Pulsar answers by default (``forceDeleteNamespaceAllowed=false``).
        Raises OSError when the data dir cannot keep it."""
        if force:
            raise BrokerError(E.NotAllowedError, "Broker doesn't allow forced deletion of namespaces")
        self.require_namespace(namespace)
        parents = [
            *self.partitioned_topics_in(namespace, "persistent"),
            *self.partitioned_topics_in(namespace, "non-persistent"),
        ]
        if parents or self.topics_in(namespace, Mode.ALL):
            raise InUse("Cannot delete non empty namespace")
        self.namespaces.delete(namespace)
        self.keep_namespaces()
        self.keep_policies()

    # -- permissions (Pulsar's grant-permission / revoke-permission) ------------------------
    def permission_scope(self, namespace: str, topic: str | None = None) -> str:
        """The scope permissions of a namespace or a topic are kept under (a partition's are its
        partitioned topic's); :class:`NotFound` when the namespace does not exist."""
        self.require_namespace(namespace)
        return namespace if topic is None else str(TopicName.parse(topic).partitioned_topic)

    def grant_permission(self, scope: str, role: str, actions: Iterable[str]) -> None:
        """Give ``role`` ``actions`` (Pulsar's AuthAction names; only ``produce`` and ``consume``
        have services here) on ``scope`` (see :meth:`permission_scope`), replacing what it had
        there. Raises GrantSyntaxError for another name, OSError when the data dir cannot keep it."""
        if not role:
            raise GrantSyntaxError("a permission needs a role")
        self.namespaces.grant(scope, role, parse_auth_actions(actions))
        self.keep_policies()

    def revoke_permission(self, scope: str, role: str) -> None:
        """Take the permissions of ``role`` on ``scope`` away (nothing to take: nothing changes,
        as Pulsar answers 204 there too)."""
        if self.namespaces.revoke(scope, role):
            self.keep_policies()

    def permissions(self, scope: str) -> dict[str, list[str]]:
        """Pulsar's GET .../permissions: role -> actions on ``scope``; a topic's include its
        namespace's (Pulsar's union of namespace and topic permissions)."""
        if "://" not in scope:
            return self.permissions_of_scope(scope)
        found = self.permissions_of_scope(TopicName.parse(scope).namespace_name)
        for role, actions in self.permissions_of_scope(scope).items():
            union = set(found.get(role, ())) | set(actions)
            found[role] = [a for a in AUTH_ACTIONS if a in union]
        return dict(sorted(found.items()))

    def auth_policies(self, namespace: str) -> dict[str, Any]:
        """Pulsar's AuthPolicies of ``namespace`` (in its Policies): the permissions granted on it
        (``namespace_auth``) and on each of its topics (``destination_auth``)."""
        topics = {
            scope: self.permissions_of_scope(scope)
            for scope in self.namespaces.all_permissions()
            if "://" in scope and TopicName.parse(scope).namespace_name == namespace
        }
        return {
            "namespace_auth": self.permissions_of_scope(namespace),
            "destination_auth": dict(sorted(topics.items())),
            "subscription_auth_roles": {},
        }

    def permissions_of_scope(self, scope: str) -> dict[str, list[str]]:
        """Role -> actions granted on ``scope`` itself (in Pulsar's AuthAction order)."""
        own = self.namespaces.permissions(scope)
        return {role: [a for a in AUTH_ACTIONS if a in actions] for role, actions in sorted(own.items())}

    def set_policies(self, scope: str, policies: Policies) -> None:
        """Set the policies of a namespace (``tenant/ns``) or topic, replacing that scope's earlier ones.

        Raises PolicySyntaxError, NamespaceNotFound, OSError (the data dir cannot keep them)."""
        self.namespaces.set_policies(scope, policies)
        self.keep_policies()

    def update_policies(self, scope: str, **changes: Any) -> None:
        """Change some of the policies of ``scope`` (keeping the others); raises as :meth:`set_policies`."""
        current = self.namespaces.policies_of(scope)
        values = {f: getattr(current, f) for f in ("deduplication", "schema_compatibility", "retention")}
        values.update(changes)
        self.set_policies(scope, Policies(**values))

    def policies(self, topic: str) -> Policies:
        """The policies that apply to ``topic``: its own, its namespace's, else the broker's."""
        cfg = self.config
        return self.namespaces.effective(topic, Policies(cfg.deduplication, cfg.schema_compatibility))

    def deduplication_enabled(self, topic: str) -> bool:
        """Whether SENDs to ``topic`` are deduplicated (never on non-persistent topics, as Pulsar)."""
        deduplication = self.policies(topic).deduplication
        return bool(deduplication) and topic.startswith("persistent://")

    def schema_compatibility(self, topic: str) -> Compatibility:
        return self.policies(topic).schema_compatibility or Compatibility.FULL

    # -- topics --------------------------------------------------------------------
    def partitions_of(self, name: str, *, create: bool) -> int:
        if name in self.partitioned:
            return self.partitioned[name]
        tn = TopicName.parse(name)
        if tn.partition_index >= 0 or name in self.topics:
            return 0
        if create and self.config.allow_auto_topic_creation and self.config.default_partitions > 0:
            self.partitioned[name] = self.config.default_partitions
            self._save_metadata()
            return self.config.default_partitions
        return 0

    def get_topic(self, name: str, *, create: bool) -> Topic | None:
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        if not create:
            return None
        tn = TopicName.parse(name)
        last_sequence: dict[str, int] = {}
        persistent = tn.is_persistent
        data_dir = self.config.data_dir if persistent else None  # a non-persistent topic stores nothing
        log_ = TopicLog(
            name,
            data_dir=data_dir,
            entries_per_ledger=self.config.entries_per_ledger,
            fsync=self.config.fsync,
            cache=self.entry_cache,
            files=self.open_files,
            on_recover=partial(note_sequence, last_sequence),
        )
        topic = Topic(
            name,
            log_,
            partition_index=tn.partition_index,
            data_dir=data_dir,
            persistent=persistent,
            last_sequence=last_sequence,
        )
        self.topics[name] = topic
        self._topic_created(name)
        return topic

    def _topic_created(self, name: str) -> None:
        if not name.startswith("persistent://"):
            return  # as Pulsar's topic-list watchers: persistent topics only
        services = [b.service for b in self.cluster.brokers] if self.cluster is not None else [self]
        for s in services:
            for watcher, digest in s.watchers.topic_created(name):
                watcher.owner.send_watch_update(watcher.watcher_id, [name], digest)

    def topics_in(self, namespace: str, mode: int = Mode.PERSISTENT) -> list[str]:
        """The topics of ``namespace`` of the domains ``mode`` asks for (partitions, not their parent),
        as GET_TOPICS_OF_NAMESPACE and the admin API list them."""
        domains = _DOMAINS_OF_MODE.get(cast(Any, mode), ("persistent",))
        prefixes = tuple(f"{domain}://{namespace}/" for domain in domains)
        names: set[str] = set()
        for name, n in self.partitioned.items():
            if name.startswith(prefixes):
                names.update(str(TopicName.parse(name).partition(i)) for i in range(n))
        names.update(t for t in self.topics if t.startswith(prefixes))
        if self.config.data_dir is not None and "persistent" in domains:
            # Topics written before a restart exist even while no client has loaded them yet.
            names.update(t for t in stored_topics(self.config.data_dir) if t.startswith(prefixes))
        return sorted(names)

    def partition_count(self, name: str) -> int | None:
        """The partitions of the partitioned topic ``name``; None when it is not one."""
        return self.partitioned.get(name)

    def partitioned_topics_in(self, namespace: str, domain: str) -> list[str]:
        prefix = f"{domain}://{namespace}/"
        return sorted(n for n in self.partitioned if n.startswith(prefix))

    def check_partitions(self, partitions: int) -> None:
        """:func:`check_partitions` with this broker's ``max_partitions_per_topic``."""
        check_partitions(partitions, self.config.max_partitions_per_topic)

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Create (or grow) a partitioned topic; raises :class:`InvalidPartitions`, NamespaceNotFound
        without its namespace.

        Only the count is stored: the partitions exist by it, so this is the same work for 2 or
        2**31-1 of them. Topic-list watchers of the namespace, if any, are told of the new
        partitions by a background task that yields to the loop between chunks.
        """
        name = str(TopicName.parse(topic))
        self.check_partitions(partitions)
        self.namespaces.require(TopicName.parse(name).namespace_name)
        before = self.partitioned.get(name, 0)
        self.partitioned[name] = partitions
        self._save_metadata()
        if self.loop is not None and self._watched(TopicName.parse(name).namespace_name):
            self.keep_task(self.loop.create_task(self._announce_partitions(name, before, partitions)))

    def _watched(self, namespace: str) -> bool:
        services = [b.service for b in self.cluster.brokers] if self.cluster is not None else [self]
        return any(s.watchers.watches(namespace) for s in services)

    async def _announce_partitions(self, name: str, start: int, stop: int) -> None:
        parent = TopicName.parse(name)
        for first in range(start, stop, ANNOUNCE_CHUNK):
            for i in range(first, min(first + ANNOUNCE_CHUNK, stop)):
                self._topic_created(str(parent.partition(i)))
            await asyncio.sleep(0)

    def terminate_topic(self, topic: str) -> tuple[int, int]:
        """Terminate a topic: producers are refused, consumers reach the end of the topic."""
        t = self.get_topic(str(TopicName.parse(topic)), create=True)
        assert t is not None
        t.terminated = True
        t.save_state()
        for p in list(t.producers.values()):
            p.owner.close_producer(p)
        for sub in t.subscriptions.values():
            self.check_end_of_topic(t, sub)
        return t.log.last_position

    def delete_topic(self, topic: str) -> None:
        """Forget a topic (a partitioned one: all its partitions) with its stored entries, subscriptions
        and cursors, as Pulsar's topic deletion; its schema stays. Connected clients are not told
        (the admin API refuses to delete a topic in use unless forced, and disconnects them first)."""
        name = TopicName.parse(topic)
        parts = self.present_partitions(str(name)) if str(name) in self.partitioned else [str(name)]
        n = self.partitioned.pop(str(name), None)
        for part in parts:
            found = self.topics.pop(part, None)
            if found is not None:
                self._dirty_topics.discard(found)
                found.log.close()
            if self.config.data_dir is not None and part.startswith("persistent://"):
                shutil.rmtree(topic_dir(self.config.data_dir, part), ignore_errors=True)
        if n:
            self._save_metadata()

    def trim_topic(self, topic: str, entries: int) -> None:
        """Drop the oldest ``entries`` entries (simulates retention)."""
        t = self.get_topic(str(TopicName.parse(topic)), create=True)
        assert t is not None
        t.log.trim_head(entries)

    def present_partitions(self, name: str) -> list[str]:
        """The partitions of the partitioned topic ``name`` that hold anything: loaded, or stored
        in the data dir. The others are empty by definition (no subscription, no entry), so what
        asks about every partition asks these only: the work follows what exists, not the count
        (which may be 2**31-1)."""
        n = self.partitioned.get(name, 0)

        def ours(topic: str) -> bool:
            tn = TopicName.parse(topic)
            return 0 <= tn.partition_index < n and str(tn.partitioned_topic) == name

        prefix = name + PARTITION_SUFFIX
        found = {t for t in self.topics if t.startswith(prefix) and ours(t)}
        if self.config.data_dir is not None and name.startswith("persistent://"):
            found.update(t for t in stored_topics(self.config.data_dir) if t.startswith(prefix) and ours(t))
        return sorted(found)

    def busy(self, name: str) -> bool:
        """Whether topic ``name`` (loaded) has connected producers or consumers."""
        topic = self.topics.get(name)
        return topic is not None and bool(
            topic.producers or any(s.consumers for s in topic.subscriptions.values())
        )

    def subscriptions_of(self, topic: str, sub_name: str) -> list[tuple[Topic, Subscription]]:
        """Subscription ``sub_name`` on the topic or each of its partitions (:class:`NotFound`:
        the topic, or the subscription on all of them)."""
        name = TopicName.parse(topic)
        n = self.partitioned.get(str(name))
        found = []
        for part in self.present_partitions(str(name)) if n else [str(name)]:
            t = self.existing_topic(part)
            if sub_name in t.subscriptions or sub_name in getattr(t, "saved_subscriptions", {}):
                found.append((t, self.subscription(t, sub_name)))
        if not found:
            raise NotFound("subscription", f"Subscription {sub_name} not found for topic {name}")
        return found

    def subscription_names(self, topic: str) -> list[str]:
        """The subscriptions of the topic or of all its partitions, with those saved and not loaded."""
        name = TopicName.parse(topic)
        n = self.partitioned.get(str(name))
        names: set[str] = set()
        for part in self.present_partitions(str(name)) if n else [str(name)]:
            t = self.existing_topic(part)
            names.update(t.subscriptions)
            names.update(getattr(t, "saved_subscriptions", {}))
        return sorted(names)

    def reset_subscription(self, topic: Topic, sub: Subscription, position: tuple[int, int]) -> None:
        """Move ``sub`` to ``position``, disconnecting its consumers first (as Pulsar's reset-cursor)."""
        for consumer in list(sub.consumers):
            cast(Any, consumer.sender).close_consumer(consumer.consumer_id)
        sub.reset(position)

    # -- cursors and messages (the binary protocol's SEEK / GET_LAST_MESSAGE_ID and the admin API) --
    def last_message_id(self, topic: Topic) -> LastMessageId:
        """The last message id of ``topic`` (GET_LAST_MESSAGE_ID, ``GET .../lastMessageId``). A
        topic never written has ``written`` False: GET_LAST_MESSAGE_ID then answers -1:-1 as
        Pulsar's ServerCnx does, the admin API the current ledger and entry -1, as Pulsar's REST
        API does (one whose entries were all trimmed still answers its last position)."""
        log_ = topic.log
        ledger, entry = log_.last_position
        written = len(log_) > 0 or log_.trimmed > 0
        last = log_.entries[-1] if len(log_) else None
        batch_index = last.num_messages - 1 if last is not None and last.is_batch else -1
        return LastMessageId(ledger, entry, topic.partition_index, batch_index, written)

    def seek_position(
        self, topic: Topic, *, position: Position | None = None, publish_time: int | None = None
    ) -> Position:
        """The mark-delete position that makes a cursor read next the entry at ``position`` (or the
        first after it; -1 ledger: the earliest; :data:`LATEST`: after the last) or the first
        published at or after ``publish_time`` (ms) -- SEEK, reset-cursor and create-subscription."""
        log_ = topic.log
        if publish_time is not None:
            idx = log_.index_by_publish_time(publish_time)
        elif position is not None:
            idx = 0 if position[0] < 0 else log_.index_at_or_after(position)
        else:
            raise ValueError("seek_position needs a position or a publish time")
        return topic.position_before_index(idx)

    def new_subscription(
        self, topic: Topic, name: str, sub_type: int, *, durable: bool, start: Position
    ) -> Subscription:
        """Open subscription ``name`` on ``topic`` at ``start`` (its saved cursor, if any, wins),
        registered on the topic and kept on disk when durable."""
        saved = getattr(topic, "saved_subscriptions", {}).get(name) if durable else None
        sub = Subscription(
            name,
            topic.log,
            sub_type,
            durable=durable,
            start=start,
            partition_index=topic.partition_index,
            on_change=lambda: self.mark_dirty(topic),
        )
        if saved:
            sub.restore(saved)
        topic.subscriptions[name] = sub
        if durable:
            self.mark_dirty(topic)
        return sub

    def subscription(self, topic: Topic, name: str) -> Subscription:
        """Subscription ``name`` of ``topic``, loaded from its saved cursor when no consumer opened it
        since the broker started; :class:`NotFound` when there is none."""
        sub = topic.subscriptions.get(name)
        if sub is not None:
            return sub
        saved = getattr(topic, "saved_subscriptions", {}).get(name)
        if saved is None:
            raise NotFound("subscription", f"Subscription {name} not found for topic {topic.name}")
        sub_type = int(saved.get("type", SubType.Exclusive))
        return self.new_subscription(topic, name, sub_type, durable=True, start=EARLIEST)

    def with_subscriptions(self, topic: Topic) -> Topic:
        """``topic`` with every saved subscription opened (after a restart a durable subscription
        is a saved cursor until a consumer comes back), so its stats show them all, as Pulsar's,
        which recovers every cursor with the topic."""
        for name in list(getattr(topic, "saved_subscriptions", {})):
            self.subscription(topic, name)
        return topic

    def stats_topic(self, topic: str) -> Topic:
        """The non-partitioned topic ``topic`` for its stats (:meth:`existing_topic`, with its
        subscriptions: :meth:`with_subscriptions`)."""
        return self.with_subscriptions(self.existing_topic(topic))

    def _partitions_visited(self, name: str) -> list[str]:
        """Every partition of the partitioned topic ``name``; NotAllowedError past
        :data:`MAX_PARTITIONS_VISITED`."""
        n = self.partitioned[name]
        if n > MAX_PARTITIONS_VISITED:
            raise BrokerError(
                E.NotAllowedError,
                f"{name} has {n} partitions, more than the {MAX_PARTITIONS_VISITED} one call visits: "
                "do it on each partition",
            )
        parent = TopicName.parse(name)
        return [str(parent.partition(i)) for i in range(n)]

    def create_subscription(self, topic: str, name: str, position: Position) -> None:
        """Create durable subscription ``name`` at ``position`` (earliest, latest or an entry: the
        next one read is that entry), on each partition of a partitioned topic (Pulsar's PUT
        .../subscription/{name}). Raises :class:`Unsupported` on a non-persistent topic,
        :class:`PreconditionFailed` when the topic does not exist and auto-creation is off,
        :class:`InUse` when the subscription exists (on any partition: then none is created),
        NotAllowedError past :data:`MAX_PARTITIONS_VISITED` partitions."""
        full = str(TopicName.parse(topic))
        if not full.startswith("persistent://"):
            raise Unsupported("Create subscription on non-persistent topic can only be done through client")
        parts = self._partitions_visited(full) if full in self.partitioned else [full]
        if not self.topic_exists(full) and not self.config.allow_auto_topic_creation:
            raise PreconditionFailed("Topic does not exist and cannot be auto-created")
        topics = []
        for part in parts:
            found = self.get_topic(part, create=True)
            assert found is not None
            if name in found.subscriptions or name in getattr(found, "saved_subscriptions", {}):
                raise InUse("Subscription already exists for topic")
            topics.append(found)
        for t in topics:
            start = self.seek_position(t, position=position)
            self.new_subscription(t, name, SubType.Exclusive, durable=True, start=start)

    def reset_cursor(
        self,
        topic: str,
        name: str,
        *,
        position: Position | None = None,
        publish_time: int | None = None,
        excluded: bool = False,
    ) -> None:
        """Move subscription ``name`` to ``position`` (the next entry read is that one, or the one
        after with ``excluded``) or to ``publish_time`` (ms; on every partition of a partitioned
        topic), disconnecting its consumers first (Pulsar's reset-cursor). A position on a
        partitioned topic is NotAllowedError, as Pulsar answers; :class:`NotFound` for a missing
        topic or subscription."""
        full = str(TopicName.parse(topic))
        if position is not None and full in self.partitioned:
            raise BrokerError(
                E.NotAllowedError, "Reset-cursor at position is not allowed for partitioned-topic"
            )
        for t, sub in self.subscriptions_of(full, name):
            if publish_time is not None:
                target = self.seek_position(t, publish_time=publish_time)
            else:
                assert position is not None
                target = self.seek_position(t, position=position)
                if excluded and t.log.index_of(position) is not None:
                    target = position
            self.reset_subscription(t, sub, target)

    def _readable(self, topic: str, what: str) -> Topic:
        """The persistent, non-partitioned topic ``topic`` whose messages an admin call reads."""
        full = str(TopicName.parse(topic))
        if full in self.partitioned:
            raise BrokerError(E.NotAllowedError, f"{what} on a partitioned topic is not allowed")
        if not full.startswith("persistent://"):
            raise BrokerError(E.NotAllowedError, f"{what} on a non-persistent topic is not allowed")
        return self.existing_topic(full)

    def peek(self, topic: str, name: str, n: int) -> Entry:
        """The ``n``-th entry (from 1) subscription ``name`` has not acknowledged (Pulsar's peek:
        entries acknowledged individually are skipped; a subscription that does not exist is
        created at the earliest position, as Pulsar does); :class:`NotFound` ``message`` past the
        end (and for ``n`` below 1, where Pulsar fails with a 500)."""
        t = self._readable(topic, "Peek messages")
        try:
            sub = self.subscription(t, name)
        except NotFound:  # as Pulsar's getSubscriptionReference: created at the earliest position
            sub = self.new_subscription(t, name, SubType.Exclusive, durable=True, start=EARLIEST)
        seen = 0
        if n >= 1:
            for i in range(t.log.index_after(sub.mark_delete), len(t.log)):
                if t.log.position(i) in sub.acked:
                    continue
                seen += 1
                if seen == n:
                    return t.log.entry(i)
        raise NotFound("message", "Message not found")

    def examine(self, topic: str, initial: str, n: int) -> Entry:
        """The ``n``-th entry (from 1; below 1 reads as 1, as Pulsar) from the ``earliest`` end of
        the topic, or from the ``latest`` for any other ``initial`` (Pulsar's examine-message);
        :class:`PreconditionFailed` for a topic without entries."""
        t = self._readable(topic, "Examine messages")
        if len(t.log) == 0:
            raise PreconditionFailed("Could not examine messages due to the total message is zero")
        n = max(n, 1)
        # From the earliest, a position past the end reads the last entry (as Pulsar's
        # getPositionAfterN); from the latest, one before the first is not found (Pulsar: a 500).
        idx = min(n, len(t.log)) - 1 if initial == "earliest" else len(t.log) - n
        if idx < 0:
            raise NotFound("message", "Message not found")
        return t.log.entry(idx)

    def message_by_id(self, topic: str, position: Position) -> Entry:
        """The entry at ``position`` (Pulsar's get-message-by-id); :class:`NotFound` when not stored."""
        t = self._readable(topic, "Get message by id")
        idx = t.log.index_of(position)
        if idx is None:
            raise NotFound("message", "Message not found")
        return t.log.entry(idx)

    def unload(self, topic: str) -> None:
        """Unload ``topic`` (a partitioned one: each partition that is loaded): its producers and
        consumers are disconnected and look it up again; in a cluster it moves to another broker.
        :class:`NotFound` when it does not exist."""
        full = str(TopicName.parse(topic))
        if not self.topic_exists(full):
            raise NotFound("topic", f"Topic {full} not found")
        parts = self.present_partitions(full) if full in self.partitioned else [full]
        for part in parts:
            if self.cluster is not None:
                self.cluster.unload_topic(part)
            else:
                self.disconnect_topic(part)

    def partition_topics(self, name: str) -> tuple[int, dict[str, Topic | None]]:
        """The partition count of the partitioned topic ``name`` and its partitions for
        partitioned stats: each partition (None: holds nothing yet) up to
        :data:`MAX_PARTITIONS_VISITED`, beyond only those that hold anything. :class:`NotFound`
        ``partitioned topic`` when it is not one."""
        n = self.partitioned.get(name)
        if n is None:
            raise NotFound("partitioned topic", f"Partitioned Topic {name} not found")
        present = {p: self.stats_topic(p) for p in self.present_partitions(name)}
        if n > MAX_PARTITIONS_VISITED:
            return n, dict(present)
        parent = TopicName.parse(name)
        return n, {str(parent.partition(i)): present.get(str(parent.partition(i))) for i in range(n)}

    def delete_subscription(self, topic: Topic, sub: Subscription) -> None:
        for consumer in list(sub.consumers):
            cast(Any, consumer.sender).close_consumer(consumer.consumer_id)
        topic.forget_subscription(sub.name)

    def stats(self, topic: str) -> dict[str, Any]:
        """The broker's own short stats of ``topic`` ({} when it is not loaded)."""
        t = self.get_topic(str(TopicName.parse(topic)), create=False)
        if t is None:
            return {}
        return {
            "msg_in": t.msg_in,
            "bytes_in": t.bytes_in,
            "entries": len(t.log),
            "producers": sorted(t.producers),
            "subscriptions": {
                n: {
                    "type": SubType.Name(cast(Any, s.sub_type)),
                    "backlog": s.backlog(),
                    "msg_out": s.msg_out,
                    "consumers": [c.name for c in s.consumers],
                    "mark_delete": s.mark_delete,
                }
                for n, s in t.subscriptions.items()
            },
        }

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    # -- compaction ------------------------------------------------------------------
    def compact(self, topic: str) -> None:
        """Start compacting ``topic`` (Pulsar's PUT .../compaction); returns at once, the status tells
        when it is done. Raises BrokerError (TopicNotFound: no such topic; NotAllowedError: a
        partitioned topic, compact its partitions) and CompactionInProgressError while one runs."""
        self._start_compaction(self.existing_topic(topic))

    def compaction_status(self, topic: str) -> dict[str, str]:
        """Pulsar's GET .../compaction: ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}``;
        raises BrokerError as :meth:`compact`."""
        t = self.existing_topic(topic)
        return {"status": t.compaction_status.value, "lastError": t.compaction_error}

    def _start_compaction(self, topic: Topic) -> None:
        self.keep_task(
            topic.start_compaction(
                retain_null_key=self.config.compaction_retain_null_key,
                max_message_size=self.config.max_message_size,
            )
        )

    def keep_task(self, task: asyncio.Task[Any]) -> None:
        """Hold ``task`` until it is done (cancelled at stop)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def compact_over_threshold(self, topic: Topic) -> None:
        """Start a compaction of ``topic`` when the bytes stored since the last one pass the threshold."""
        threshold = self.config.compaction_threshold
        if (
            threshold > 0
            and topic.bytes_since_compaction > threshold
            and topic.compaction_status != CompactionStatus.RUNNING
        ):
            self._start_compaction(topic)

    # -- connections -------------------------------------------------------------------
    def inject(self, **faults: Any) -> None:
        """Arm faults for the next operations, e.g. ``inject(fail_receipts=1)``; see :class:`Faults`."""
        for k, v in faults.items():
            if not hasattr(self.faults, k):
                raise AttributeError(f"unknown fault {k!r}")
            setattr(self.faults, k, v)

    def drop_connections(self, topic: str | None = None) -> int:
        """Cut TCP connections (all, or those with producers/consumers on ``topic``); returns how many."""
        name = str(TopicName.parse(topic)) if topic else None
        victims = [c for c in self.connections if name is None or c.uses_topic(name)]
        for c in victims:
            c.abort()
        return len(victims)

    def close_producers(self, topic: str) -> None:
        """Send CLOSE_PRODUCER to every producer of ``topic`` (clients look up again and reconnect)."""
        name = str(TopicName.parse(topic))
        for c in list(self.connections):
            c.close_topic_producers(name)

    def close_consumers(self, topic: str) -> None:
        """Send CLOSE_CONSUMER to every consumer of ``topic``."""
        name = str(TopicName.parse(topic))
        for c in list(self.connections):
            c.close_topic_consumers(name)

    def disconnect_topic(self, name: str) -> None:
        """Close the producers and consumers of topic ``name`` (an unload)."""
        self.close_producers(name)
        self.close_consumers(name)

    def new_producer_name(self) -> str:
        # The boot id keeps names unique across restarts (a name carries its deduplication state).
        return f"pulsarwire-{self.urls.port}-{self._boot_id}-{next(self._producer_names)}"

    # -- cursors on disk -------------------------------------------------------------------
    def mark_dirty(self, topic: Topic) -> None:
        if topic.data_dir is None:
            return
        self._dirty_topics.add(topic)
        if self._flush_handle is None and self.loop is not None:
            self._flush_handle = self.loop.call_later(self.config.cursor_flush_seconds, self.flush_state)

    def flush_state(self) -> None:
        """Write the cursors of the topics marked dirty; a topic whose write fails stays dirty and
        is tried again at the next flush (its cursors on disk stay older: a restart redelivers)."""
        self._flush_handle = None
        dirty, self._dirty_topics = self._dirty_topics, set()
        failed = []
        for topic in dirty:
            try:
                topic.save_state()
            except OSError as exc:
                self.write_failures += 1
                log.error(
                    "cannot save the cursors of %s (tried again in %g s): %s",
                    topic.name,
                    RETRY_WRITE_SECONDS,
                    exc,
                )
                failed.append(topic)
        if failed:
            self._dirty_topics.update(failed)
            if self._flush_handle is None and self.loop is not None:
                self._flush_handle = self.loop.call_later(RETRY_WRITE_SECONDS, self.flush_state)

    def close_logs(self) -> None:
        self.flush_state()
        for topic in self.topics.values():
            topic.log.close()

    def check_end_of_topic(self, topic: Topic, sub: Subscription) -> None:
        """Tell the consumers of ``sub`` they reached the end of a terminated ``topic``, if they did."""
        if not topic.terminated:
            return
        last = topic.log.last_position
        if sub.mark_delete >= last or not topic.log.entries:
            for c in sub.consumers:
                c.sender.send_end_of_topic(c)  # type: ignore[attr-defined]
