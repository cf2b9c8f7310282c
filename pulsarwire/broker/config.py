"""The broker's configuration: :class:`BrokerConfig` (every setting, with Pulsar's defaults where
Pulsar has one) and :class:`Listener` (one advertised listener's URLs).

Plain data: the service layer, the binary connection handler, the web service and the
command line all read it; nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pulsarwire.codec.frames import DEFAULT_MAX_MESSAGE_SIZE

from .auth import Authenticator
from .authz import Grants
from .policies import DEFAULT_NAMESPACE, Policies
from .schemas import MAX_SCHEMA_SIZE, Compatibility
from .storage import DEFAULT_CACHE_BYTES, DEFAULT_MAX_OPEN_LOGS
from .watch import MAX_TOPICS_PATTERN_LENGTH, MAX_WATCHERS_PER_CONNECTION

#: Pulsar's default name of the listener broker-to-broker traffic uses (internalListenerName).
INTERNAL_LISTENER = "internal"


@dataclass(frozen=True, slots=True)
class Listener:
    """One advertised listener's addresses (Pulsar's ``advertisedListeners`` entry): pulsar://, pulsar+ssl://."""

    url: str | None = None
    url_tls: str | None = None


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 0
    data_dir: Path | None = None
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    allow_auto_topic_creation: bool = True
    default_partitions: int = 0
    deduplication: bool = False
    entries_per_ledger: int = 50_000
    fsync: bool = False
    #: bytes of entry bodies cached in RAM for reads, shared by all topics (data dir only)
    entry_cache_size: int = DEFAULT_CACHE_BYTES
    #: entry logs open at once (LRU, shared by all topics; data dir only)
    max_open_logs: int = DEFAULT_MAX_OPEN_LOGS
    keepalive_seconds: float = 30.0
    cursor_flush_seconds: float = 0.1
    #: authentication: a TokenAuth, a TlsAuth, or an Authentication of several providers and an
    #: anonymous role (None: every client is accepted and nothing is authorized)
    auth: Authenticator | None = None
    #: who may produce / consume where, consulted when ``auth`` is on (then no grant: only superusers act)
    grants: Grants = field(default_factory=Grants)
    #: seconds a connection has to complete CONNECT (the official clients' own connection timeout is 10 s)
    connect_timeout: float = 10.0
    #: concurrent connections accepted; 0 = no limit (Pulsar's brokerMaxConnections default)
    max_connections: int = 0
    #: seconds a client has to answer AUTH_CHALLENGE with a fresh credential
    auth_challenge_timeout: float = 10.0
    #: TLS listener (pulsar+ssl://): port (0 = any free port) and PEM files
    tls_port: int | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    #: CAs that sign client certificates; when set, the TLS listener asks clients for a certificate
    #: (optional, as Pulsar's tlsRequireTrustedClientCertOnConnect=false) -- TlsAuth needs it
    tls_trust_certs_file: Path | None = None
    #: host name or address put in LOOKUP answers and service_url (None: see advertised_host)
    advertised_address: str | None = None
    #: Pulsar's advertisedListeners: a LOOKUP naming one of them is answered with its URLs, one
    #: naming another is refused; the internal listener (below) is this broker's own URLs unless given
    advertised_listeners: dict[str, Listener] = field(default_factory=dict)
    #: the listener LOOKUPs without a listener name get (Pulsar's internalListenerName)
    internal_listener_name: str = INTERNAL_LISTENER
    #: namespaces ("tenant/namespace") that exist from the start; a standalone Pulsar has public/default
    namespaces: tuple[str, ...] = (DEFAULT_NAMESPACE,)
    #: policies by namespace ("tenant/ns") or topic ("persistent://tenant/ns/topic"); a topic's win
    #: over its namespace's, which win over the broker's own (deduplication, schema_compatibility)
    policies: dict[str, Policies] = field(default_factory=dict)
    #: the broker's schema compatibility strategy (Pulsar's schemaCompatibilityStrategy, default FULL)
    schema_compatibility: Compatibility = Compatibility.FULL
    #: longest topics pattern (without scheme) the broker evaluates (Pulsar: subscriptionPatternMaxLength)
    max_topics_pattern_length: int = MAX_TOPICS_PATTERN_LENGTH
    max_watchers_per_connection: int = MAX_WATCHERS_PER_CONNECTION
    #: largest serialized schema accepted (Pulsar documents no cap but the message size)
    max_schema_size: int = MAX_SCHEMA_SIZE
    #: the web service (admin REST API, HTTP lookup, /metrics; 0 = any free port); None = off
    http_port: int | None = None
    #: the web service over TLS (Pulsar's webServicePortTls; the TLS listener's certificate and key;
    #: 0 = any free port); None = off
    https_port: int | None = None
    #: tenants created at start with their admin roles (Pulsar's TenantInfo.adminRoles)
    tenants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: most partitions of a partitioned topic; 0 = no check beyond Pulsar's 32-bit int (Pulsar's
    #: maxNumPartitionsPerPartitionedTopic, default 0)
    max_partitions_per_topic: int = 0
    #: compact a topic once this many bytes were stored since its last compaction (0: never;
    #: Pulsar's compactionThreshold / brokerServiceCompactionThresholdInBytes)
    compaction_threshold: int = 0
    #: compaction keeps messages without a key (Pulsar's topicCompactionRetainNullKey, default false)
    compaction_retain_null_key: bool = False
