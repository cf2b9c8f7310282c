"""The job model: what a job file means once its profile is merged in and ``${...}`` resolved.

:mod:`pipelines.jobs.config` turns YAML into one plain document; :class:`Job` (pydantic v2)
validates it before Spark starts. Every section forbids unknown keys, values are
checked for type and range, and cross-key rules (exactly one topic selector, merge
needs merge keys, a Pulsar → Delta job needs its offset store, ...) are model
validators. A validator reports a problem by raising :func:`problem`, a pydantic error
whose context carries a short human message and, where the problem belongs to a key
below the one validated, the relative path of that key; :mod:`pipelines.jobs.config` turns
these into ``file: key.path: message`` lines (:class:`~pipelines.errors.JobError`).

``source:`` and ``sink:`` each hold exactly one connector section, ``<kind>: {...}``: this
module's section lists (:class:`BuiltinSources`, :class:`BuiltinSinks`, and a profile's
``<kind>:`` defaults as :class:`Job` fields) and the docs are the only places that list the
kinds; connectors installed as packages add theirs (:mod:`pipelines.connectors`). A section
says what the job-level rules need to know of its kind (keeps positions, bounded, needs a
checkpoint, its Delta tables) and opens its connector from :meth:`Job.context`. The Pulsar
sections (and their ``client:``) are the option models of :mod:`pipelines.options` plus a few
job keys, so a key, its type, default and checks are the ones the Spark data source uses.
Secrets (``auth_token``, Delta ``storage_options``) are ``SecretStr``; the repr of every
section masks them and any mapping value whose key looks secret
(:func:`pipelines.masking.is_secret_key`).
"""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar, cast, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    PrivateAttr,
    SecretStr,
    Tag,
    create_model,
    model_serializer,
    model_validator,
)

from pipelines.connectors import plugin_sections
from pipelines.connectors.base import JobContext
from pipelines.connectors.section import ConnectorSection, ProfileSection, Section
from pipelines.errors import JobError
from pipelines.masking import mask
from pipelines.options.auth import CLASS_OF
from pipelines.options.bound import Bound, end_problem
from pipelines.options.client import CLIENT_PREFIX, ClientFields, ServiceUrl
from pipelines.options.grammar import GrammarError, duration_ms, kind_of, show
from pipelines.options.model import Loc, NonNegInt, PosInt, Text, option, problem, problems
from pipelines.options.sink import SinkFields
from pipelines.options.source import SourceFields
from pipelines.state.delta import is_table_name
from pipelines.suggest import did_you_mean

__all__ = [
    "Backfill",
    "ClientConfig",
    "ConsoleSink",
    "DeltaSink",
    "DeltaSource",
    "Job",
    "PulsarDefaults",
    "PulsarSink",
    "PulsarSource",
    "Sink",
    "Source",
    "SparkSettings",
    "Transform",
    "Trigger",
    "duration_ms",
    "problem",
]


T = TypeVar("T")

# -- problems and paths ------------------------------------------------------------------------

# -- scalar types ----------------------------------------------------------------------------

_NAME = re.compile(r"[a-z0-9_-]+")


def _check_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise problem(
            f"expected lowercase letters, digits, '_' and '-' (e.g. orders_ingest), got {show(value)}"
        )
    return value


def _scalar_text(value: Any) -> Any:
    """Spark conf values: YAML scalars become the strings Spark expects (true → "true")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


_PY_SPEC = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")


def _check_py_spec(value: str) -> str:
    if not _PY_SPEC.fullmatch(value.strip()):
        raise problem(f"expected module:function (e.g. jobs.transforms:enrich), got {show(value)}")
    return value.strip()


def _one_or_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


Name = Annotated[str, AfterValidator(_check_name)]
ConfValue = Annotated[str, BeforeValidator(_scalar_text)]


# -- positions and bounds -------------------------------------------------------------------


# -- client and connection ------------------------------------------------------------------


class OAuth2Config(Section):
    """``auth.oauth2:`` — OAuth2 client credentials (StreamNative Cloud and other managed Pulsar).

    ``private_key`` is the credentials JSON (client_id, client_secret) as a path, ``file:`` or
    ``data:`` URL: a secret-scope file on Databricks, or ``${env:...}``; it is masked.
    """

    issuer_url: Text
    private_key: Text
    audience: Text | None = None
    scope: Text | None = None


class BasicAuthConfig(Section):
    """``auth.basic:`` — user name and password (give it as ``${env:NAME}``)."""

    username: Text
    password: SecretStr


class AuthConfig(Section):
    """``auth:`` — one of ``oauth2`` or ``basic`` (→ ``authPluginClassName`` + ``authParams``)."""

    oauth2: OAuth2Config | None = None
    basic: BasicAuthConfig | None = None

    @model_validator(mode="after")
    def _one(self) -> AuthConfig:
        if (self.oauth2 is None) == (self.basic is None):
            raise problem("give exactly one of oauth2 or basic")
        return self

    def options(self) -> dict[str, str]:
        """``authPluginClassName`` and ``authParams`` (JSON, secrets in clear), below ``pulsar.client.``."""

        if self.oauth2 is not None:
            o = self.oauth2
            params = {"issuerUrl": o.issuer_url, "privateKey": o.private_key}
            params |= {k: v for k, v in (("audience", o.audience), ("scope", o.scope)) if v is not None}
            kind = "oauth2"
        else:
            assert self.basic is not None
            params = {"userId": self.basic.username, "password": self.basic.password.get_secret_value()}
            kind = "basic"
        return {"authPluginClassName": CLASS_OF[kind], "authParams": json.dumps(params)}


class ClientConfig(Section, ClientFields):
    """``client:`` — how to reach the cluster (→ ``pulsar.client.*`` options).

    The settings are :class:`~pipelines.options.client.ClientFields`; ``auth:`` is the job
    file's spelling of ``authPluginClassName`` + ``authParams``.
    """

    auth: AuthConfig | None = None

    @model_validator(mode="after")
    def _check(self) -> ClientConfig:
        if self.auth is not None and (self.auth_token is not None or self.auth_token_file is not None):
            raise problem("give auth or auth_token/auth_token_file, not both", "auth")
        return self

    def spark_options(self) -> dict[str, str]:
        """The ``pulsar.client.*`` options (without the prefix) of the keys that are set, secrets in clear."""
        out = super().spark_options()
        if self.auth is not None:
            out.update(self.auth.options())
        return out


class PulsarDefaults(ProfileSection):
    """The profile's ``pulsar:`` section: defaults for every Pulsar source and sink of a job."""

    service_url: ServiceUrl | None = None
    client: ClientConfig = Field(default_factory=ClientConfig)


# -- sources ------------------------------------------------------------------------------


class PulsarSource(ConnectorSection, SourceFields):
    """``source.pulsar`` — a stream over Pulsar topics (the ``pulsarwire`` data source).

    The keys are the source options (:class:`~pipelines.options.source.SourceFields`), plus
    ``quarantine_table`` and ``client``.
    """

    KEEPS_POSITIONS = True
    BOUNDED = True

    #: a message that cannot be decoded goes there with on_corrupt_message: quarantine
    quarantine_table: Text | None = None
    client: ClientConfig = option(
        default_factory=ClientConfig, spark=CLIENT_PREFIX, doc="how to reach the cluster (`pulsar.client.*`)"
    )

    @model_validator(mode="after")
    def _check(self) -> PulsarSource:
        found: list[tuple[Loc, str]] = []
        if self.on_corrupt_message == "quarantine" and self.quarantine_table is None:
            found.append(
                (("quarantine_table",), "required with on_corrupt_message: quarantine (the Delta table)")
            )
        if self.quarantine_table is not None and self.on_corrupt_message != "quarantine":
            found.append((("quarantine_table",), "only with on_corrupt_message: quarantine"))
        if found:
            raise problems(found)
        return self

    def subscription_of(self, job: str) -> str:
        """The durable subscription of the job's stream (default: the job name)."""
        return self.subscription or job

    def stream_options(self, job: str) -> dict[str, str]:
        """The ``pulsarwire`` source options (streaming; secrets in clear). ``offsetStore``/``job``
        are the connector's to add."""
        opts = self.spark_options()
        opts["subscriptionName"] = self.subscription_of(job)
        return opts

    def batch_options(self, job: str, start: Bound, end: Bound) -> dict[str, str]:
        """Options of a bounded batch read of ``(start, end]``: the streaming-only options
        (admission control, subscription, starting position) left out."""
        opts = self.stream_options(job)
        for key in (
            "maxMessagesPerTrigger",
            "maxBytesPerTrigger",
            "minMessagesPerTrigger",
            "maxTriggerDelay",
            "subscriptionName",
            "startingOffsets",
            "startingTime",
            "waitForTopic",
        ):
            opts.pop(key, None)
        opts.update(start.options())
        opts.update(end.options(end=True))
        return opts

    def error_keys(self) -> dict[str, str]:
        return {
            "MissingTopicError": "source.pulsar.topic",
            "DataLossError": "source.pulsar.fail_on_data_loss",
        }

    def describe(self) -> str:
        return f"pulsar {self.topic or ','.join(self.topics or []) or f'/{self.topics_pattern}/'}"

    def tables(self) -> list[tuple[str, str, bool]]:
        return [] if self.quarantine_table is None else [("quarantine_table", self.quarantine_table, True)]

    def open(self, ctx: JobContext) -> Any:
        from pipelines.connectors.pulsar import PulsarSourceConnector

        return PulsarSourceConnector(self, ctx)


class DeltaSource(ConnectorSection):
    """``source.delta`` — a Delta table's appended versions (publish jobs: Delta → Pulsar)."""

    path: Text
    starting_version: NonNegInt | None = None

    def describe(self) -> str:
        return f"delta {self.path}"

    def tables(self) -> list[tuple[str, str, bool]]:
        return [("path", self.path, False)]

    def open(self, ctx: JobContext) -> Any:
        from pipelines.connectors.delta import DeltaSourceConnector

        return DeltaSourceConnector(self, ctx)


def _exactly_one(model: BaseModel, names: tuple[str, ...]) -> None:
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        got = f" (got {', '.join(given)})" if given else ""
        raise problem(f"give exactly one of {', '.join(names)}{got}")


class Sections(Section):
    """``source:`` or ``sink:`` — exactly one connector section, ``<kind>: {...}``."""

    @model_validator(mode="after")
    def _check(self) -> Sections:
        _exactly_one(self, tuple(type(self).model_fields))
        return self

    @property
    def kind(self) -> str:
        """The kind of the section that is set (``pulsar``)."""
        return next(n for n in type(self).model_fields if getattr(self, n) is not None)

    @property
    def section(self) -> ConnectorSection:
        """The section that is set."""
        return cast(ConnectorSection, getattr(self, self.kind))


S = TypeVar("S", bound=Section)


def _with_plugins(base: type[S], side: str) -> type[S]:
    """``base`` with a field per connector section installed for ``side`` (entry points of
    :mod:`pipelines.connectors`); ``base`` itself when there is none."""
    extra = plugin_sections(side)
    if not extra:
        return base
    fields: dict[str, Any] = {kind: (model | None, None) for kind, model in extra.items()}
    return cast(type[S], create_model(base.__name__, __base__=base, __module__=base.__module__, **fields))


def _model(field: Any) -> type[ConnectorSection]:
    """The section model of an optional ``<kind>:`` field."""
    return cast(type[ConnectorSection], next(a for a in get_args(field.annotation) if a is not type(None)))


def source_kinds(flag: str) -> str:
    """The source kinds whose section has ``flag`` (``BOUNDED``): ``pulsar`` or ``pulsar or x``."""
    return " or ".join(k for k, f in Source.model_fields.items() if getattr(_model(f), flag))


class BuiltinSources(Sections):
    """``source:`` — exactly one of ``pulsar`` and ``delta`` (and installed connectors' kinds)."""

    pulsar: PulsarSource | None = None
    delta: DeltaSource | None = None


# -- transform ----------------------------------------------------------------------------


class Transform(Section):
    """One transform step: SQL statements over the view ``source``, or one Python function.

    ``transform:`` is one step (a mapping) or a list of steps applied in order, SQL and Python
    mixed; each step reads the previous step's result (:meth:`Job.transform_steps`).
    """

    sql: Annotated[list[Text], BeforeValidator(_one_or_list), Field(min_length=1)] | None = None
    python: Annotated[str, AfterValidator(_check_py_spec)] | None = None

    @model_validator(mode="after")
    def _check(self) -> Transform:
        _exactly_one(self, ("sql", "python"))
        return self


#: the tags of ``transform``'s two forms; pydantic puts them in an error's location, the job
#: loader leaves them out (``transform.sql[1]``, ``transform[2].python``)
ONE_STEP, STEPS = "<one step>", "<steps>"
UNION_TAGS = frozenset({ONE_STEP, STEPS})

#: ``transform:`` — one step (a mapping) or a list of steps
Transforms = Annotated[
    Annotated[Transform, Tag(ONE_STEP)] | Annotated[list[Transform], Field(min_length=1), Tag(STEPS)],
    Discriminator(lambda v: STEPS if isinstance(v, list) else ONE_STEP),
]


def import_function(spec: str, roots: tuple[Path, ...] = ()) -> Callable[..., Any]:
    """The function named by ``module:function``; ``roots`` are put on ``sys.path`` first.

    Raises ValueError with a short message (no module, no such function, import failed).
    """
    module_name, _, func_name = spec.partition(":")
    for root in roots:
        text = str(root)
        if text not in sys.path:
            sys.path.insert(0, text)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ValueError(f"no module named {exc.name!r}") from None
        raise ValueError(f"importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise ValueError(f"importing {module_name} failed: {type(exc).__name__}: {exc}") from None
    func = getattr(module, func_name, None)
    if func is None or not callable(func):
        raise ValueError(f"module {module_name!r} has no function {func_name!r}")
    return func  # type: ignore[no-any-return]


# -- sinks ----------------------------------------------------------------------------------


class DeltaSink(ConnectorSection):
    """``sink.delta`` — append or merge each micro-batch into a Delta table, exactly once."""

    KEEPS_POSITIONS = True

    path: Text
    mode: Literal["append", "merge"] = "append"
    partition_by: Annotated[list[Text], Field(min_length=1)] | None = None
    merge_keys: Annotated[list[Text], Field(min_length=1)] | None = None
    #: ``merge``: a batch with columns the table lacks adds them (schema evolution); unset: the
    #: transformed rows must have the table's columns, checked before the query starts
    schema_mode: Literal["merge"] | None = None

    @model_validator(mode="after")
    def _check(self) -> DeltaSink:
        if self.mode == "merge" and self.merge_keys is None:
            raise problem("required with mode: merge (the columns that identify a row)", "merge_keys")
        if self.mode != "merge" and self.merge_keys is not None:
            raise problem("only with mode: merge", "merge_keys")
        return self

    def describe(self) -> str:
        return f"delta {self.path} ({self.mode})"

    def tables(self) -> list[tuple[str, str, bool]]:
        return [("path", self.path, True)]

    def open(self, ctx: JobContext) -> Any:
        from pipelines.connectors.delta import DeltaSinkConnector

        return DeltaSinkConnector(self, ctx)


class PulsarSink(ConnectorSection, SinkFields):
    """``sink.pulsar`` — publish each row (``value``, optional ``key``/``properties``/...).

    The keys are the sink options (:class:`~pipelines.options.sink.SinkFields`), plus
    ``exactly_once`` and ``client``.
    """

    exactly_once: bool = True
    client: ClientConfig = option(
        default_factory=ClientConfig, spark=CLIENT_PREFIX, doc="how to reach the cluster (`pulsar.client.*`)"
    )

    @model_validator(mode="after")
    def _check(self) -> PulsarSink:
        if not self.exactly_once and self.producer_name_prefix is not None:
            raise problem("only with exactly_once: true", "producer_name_prefix")
        return self

    def write_options(self, job: str) -> dict[str, str]:
        """The ``pulsarwire`` sink options (secrets in clear). ``producerNamePrefix`` is the job
        name unless set (exactly once); ``batchId`` is the runner's."""
        opts = self.spark_options()
        opts.pop("producerNamePrefix", None)
        if self.exactly_once:
            opts["producerNamePrefix"] = self.producer_name_prefix or job
        return opts

    def describe(self) -> str:
        return f"pulsar {self.topic or '(topic column)'}"

    def open(self, ctx: JobContext) -> Any:
        from pipelines.connectors.pulsar import PulsarSinkConnector

        return PulsarSinkConnector(self, ctx)


class ConsoleSink(ConnectorSection):
    """``sink.console`` — print each micro-batch (trying a job out)."""

    NEEDS_CHECKPOINT = False

    rows: PosInt = 20
    truncate: bool = True

    def describe(self) -> str:
        return "console"

    def open(self, ctx: JobContext) -> Any:
        from pipelines.connectors.console import ConsoleSinkConnector

        return ConsoleSinkConnector(self, ctx)


class BuiltinSinks(Sections):
    """``sink:`` — exactly one of ``delta``, ``pulsar`` and ``console`` (and installed connectors')."""

    delta: DeltaSink | None = None
    pulsar: PulsarSink | None = None
    console: ConsoleSink | None = None


if TYPE_CHECKING:
    Source = BuiltinSources
    Sink = BuiltinSinks
else:
    Source = _with_plugins(BuiltinSources, "source")
    Sink = _with_plugins(BuiltinSinks, "sink")


# -- trigger, spark, backfill ---------------------------------------------------------------

_TRIGGER_HELP = "expected availableNow, once or {processing_time: <duration>}"


class Trigger(Section):
    """``trigger:`` — ``availableNow`` | ``once`` | ``{processing_time: 30s}``."""

    kind: Literal["availableNow", "once", "processing_time"]
    processing_time: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _parse(cls, data: Any) -> Any:
        if isinstance(data, Trigger):
            return data
        if isinstance(data, str):
            if data in ("availableNow", "once"):
                return {"kind": data}
            raise problem(f"{_TRIGGER_HELP}, got {show(data)}{did_you_mean(data, ['availableNow', 'once'])}")
        if isinstance(data, dict) and data:
            unknown = [k for k in data if k != "processing_time"]
            if unknown:
                raise problem("unknown key (expected processing_time)", str(unknown[0]))
            value = data["processing_time"]
            if not isinstance(value, str | int) or isinstance(value, bool):
                raise problem(f"expected a duration such as 30s, got {kind_of(value)}", "processing_time")
            try:
                duration_ms(value)
            except GrammarError as exc:
                raise problem(str(exc), "processing_time") from None
            return {"kind": "processing_time", "processing_time": str(value).strip()}
        raise problem(f"{_TRIGGER_HELP}, got {kind_of(data)}")

    @model_serializer(mode="plain")
    def _dump(self) -> Any:
        if self.kind == "processing_time":
            return {"processing_time": self.processing_time}
        return self.kind

    @property
    def interval_ms(self) -> int | None:
        """The processing-time interval in milliseconds (None for availableNow/once)."""
        return None if self.processing_time is None else duration_ms(self.processing_time)

    def spark_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``DataStreamWriter.trigger``."""
        if self.kind == "availableNow":
            return {"availableNow": True}
        if self.kind == "once":
            return {"once": True}
        return {"processingTime": f"{self.interval_ms} milliseconds"}


def _available_now() -> Trigger:
    return Trigger.model_construct(kind="availableNow", processing_time=None)


class SparkSettings(Section):
    """``spark:`` — the session (profile) plus per-job conf; mappings merge profile → job."""

    session: Literal["new", "existing"] = "new"
    master: Text | None = None
    app_name: Text | None = None
    delta_engine: Literal["auto", "deltalake", "delta-spark"] = "auto"
    conf: dict[str, ConfValue] = Field(default_factory=dict)
    storage_options: dict[str, SecretStr] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> SparkSettings:
        if self.session == "existing" and self.master is not None:
            raise problem("only with session: new (an existing session keeps its master)", "master")
        return self


class Backfill(Section):
    """``backfill:`` — the default range of ``pipelines backfill`` (``from`` required, ``to`` = latest)."""

    start: Bound = Field(alias="from")
    end: Bound | None = Field(None, alias="to")

    @model_validator(mode="after")
    def _check(self) -> Backfill:
        if self.end is not None and (why := end_problem(self.end)):
            raise problem(why, "to")
        if (
            self.end is not None
            and self.start.kind == "time"
            and self.end.kind == "time"
            and (self.start.time_ms or 0) >= (self.end.time_ms or 0)
        ):
            raise problem("must be after from", "to")
        return self


# -- the job --------------------------------------------------------------------------------


class Job(Section):
    """A validated job: profile, job file and ``--set`` overrides merged, ``${...}`` resolved.

    Built by :func:`pipelines.jobs.config.load_job`, which also records :attr:`source_file`
    (for messages), :attr:`env` and :attr:`profile_file`.
    """

    name: Name
    description: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    pulsar: PulsarDefaults | None = None
    source: Source
    transform: Transforms | None = None
    sink: Sink
    trigger: Trigger = Field(default_factory=_available_now)
    checkpoint: Text | None = None
    offsets: Text | None = None
    spark: SparkSettings = Field(default_factory=SparkSettings)
    backfill: Backfill | None = None

    _source_file: str = PrivateAttr("<job>")
    _env: str | None = PrivateAttr(None)
    _profile_file: str | None = PrivateAttr(None)
    _root: Path = PrivateAttr(default_factory=Path.cwd)
    _secrets: frozenset[str] = PrivateAttr(frozenset())
    _via: dict[str, tuple[str, ...]] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> Job:
        found: list[tuple[Loc, str]] = []
        source, sink = self.source.section, self.sink.section
        if self.checkpoint is None and sink.NEEDS_CHECKPOINT:
            found.append(
                (("checkpoint",), "required (the directory where Spark records the stream's progress)")
            )
        if self.offsets is None and source.KEEPS_POSITIONS and sink.KEEPS_POSITIONS:
            found.append(
                (
                    ("offsets",),
                    f"required when the source is {self.source.kind} and the sink is {self.sink.kind} "
                    "(the offset store table)",
                )
            )
        for key, which in (("offsets", "KEEPS_POSITIONS"), ("backfill", "BOUNDED")):
            if getattr(self, key) is not None and not getattr(source, which):
                found.append(((key,), f"only for a {source_kinds(which)} source"))
        if self.spark.delta_engine == "deltalake":
            tables = [(("source", self.source.kind, key), path) for key, path, _ in source.tables()]
            tables += [(("sink", self.sink.kind, key), path) for key, path, _ in sink.tables()]
            for where, target in [*tables, (("offsets",), self.offsets)]:
                if target is not None and is_table_name(target):
                    found.append(
                        (
                            where,
                            f"{target!r} is a table name: the deltalake engine takes paths "
                            "(or use delta-spark)",
                        )
                    )
        if found:
            raise problems(found)
        return self

    # -- provenance --------------------------------------------------------------------------

    @property
    def source_file(self) -> str:
        """The job file as the user named it (``jobs/orders_ingest.yaml``)."""
        return self._source_file

    @property
    def env(self) -> str | None:
        """The profile name (``local``), None when built without one."""
        return self._env

    @property
    def profile_file(self) -> str | None:
        return self._profile_file

    @property
    def project_root(self) -> Path:
        """Where relative job paths and ``transform.python`` modules are resolved."""
        return self._root

    def origin(self, path: str) -> str:
        """Where the value at ``path`` came from, for messages: ``pulsar.service_url (conf/local.yaml)
        ← $PULSAR_URL``; empty when it was written in place."""
        return " ← ".join(self._via.get(path, ()))

    def error(self, path: str, message: str) -> JobError:
        """A :class:`JobError` ``<job file>: <path>: <message>`` (for the runner's own checks)."""
        return JobError(
            f"{self._source_file}: {path}: {message}" if path else f"{self._source_file}: {message}"
        )

    def __repr__(self) -> str:
        return mask(super().__repr__(), self._secrets)

    def __str__(self) -> str:
        return mask(super().__str__(), self._secrets)

    # -- what the runner needs -----------------------------------------------------------------

    @property
    def app_name(self) -> str:
        return self.spark.app_name or f"pipelines-{self.name}"

    def storage_options(self) -> dict[str, str] | None:
        """``spark.storage_options`` in clear for deltalake (None when empty)."""
        opts = {k: v.get_secret_value() for k, v in self.spark.storage_options.items()}
        return opts or None

    def context(self) -> JobContext:
        """What the job's connectors know of it (:class:`~pipelines.connectors.base.JobContext`)."""
        return JobContext(
            name=self.name,
            file=self._source_file,
            checkpoint=self.checkpoint,
            offsets=self.offsets,
            storage_options=self.storage_options(),
            origins={k: " ← ".join(v) for k, v in self._via.items()},
        )

    def delta_tables(self) -> list[tuple[str, str, bool]]:
        """Every Delta table the job reads or writes: (key, path, written); the offset store too."""
        out = [(f"source.{self.source.kind}.{k}", p, w) for k, p, w in self.source.section.tables()]
        out += [(f"sink.{self.sink.kind}.{k}", p, w) for k, p, w in self.sink.section.tables()]
        return out + ([("offsets", self.offsets, True)] if self.offsets is not None else [])

    def backfill_window(self, start: Bound | None = None, end: Bound | None = None) -> tuple[Bound, Bound]:
        """The range of ``pipelines backfill``: ``start``/``end`` (``--from``/``--to``) over the
        ``backfill`` section; the end defaults to latest, a time start's latest end to now. Raises
        JobError without a start (the one place of this rule)."""
        start = start or (self.backfill.start if self.backfill else None)
        end = end or (self.backfill.end if self.backfill else None)
        if start is None:
            raise self.error("backfill", "no range: give --from (and --to) or a backfill section")
        if end is not None and (why := end_problem(end)):
            raise self.error("backfill.to", why)
        return start, end or Bound.model_construct(kind="latest")

    def _pulsarwire(self, side: str, section: Any, method: str) -> Any:
        if not hasattr(section, method):
            raise self.error(side, f"is {getattr(self, side).kind}, not pulsar")
        return getattr(section, method)

    def source_options(self) -> dict[str, str]:
        """The ``pulsarwire`` data source's options of the source section (streaming; secrets
        in clear). Raises JobError for a source that is not read with it."""
        return dict(self._pulsarwire("source", self.source.section, "stream_options")(self.name))

    def backfill_options(self, start: Bound | None = None, end: Bound | None = None) -> dict[str, str]:
        """Options of the bounded batch read of :meth:`backfill_window` (``spark.read``)."""
        read = self._pulsarwire("source", self.source.section, "batch_options")
        return dict(read(self.name, *self.backfill_window(start, end)))

    def sink_options(self) -> dict[str, str]:
        """The ``pulsarwire`` sink options of the sink section (secrets in clear). Raises JobError
        for a sink that is not written with it."""
        return dict(self._pulsarwire("sink", self.sink.section, "write_options")(self.name))

    def transform_steps(self) -> list[tuple[str, Transform]]:
        """The transform steps in the order they apply, each with its key path: ``transform``
        for the one-step form, ``transform[i]`` for the steps of a list."""
        if self.transform is None:
            return []
        if isinstance(self.transform, Transform):
            return [("transform", self.transform)]
        return [(f"transform[{i}]", step) for i, step in enumerate(self.transform)]

    def step_function(self, key: str, step: Transform) -> Callable[..., Any]:
        """The ``python`` function of ``step`` (at ``key``); the project root goes on sys.path.

        Raises JobError naming ``<key>.python`` when it cannot be imported.
        """
        assert step.python is not None
        try:
            return import_function(step.python, (self._root,))
        except ValueError as exc:
            raise self.error(f"{key}.python", str(exc)) from None

    def transform_function(self) -> Callable[..., Any] | None:
        """The first ``python`` step's function (None without one); see :meth:`step_function`."""
        return next(
            (self.step_function(k, s) for k, s in self.transform_steps() if s.python is not None), None
        )


#: every connector kind, built in or installed: a profile's (or the job's) ``<kind>:`` section
#: gives defaults for ``source.<kind>`` and ``sink.<kind>``; ``pulsar:`` is also a Job field,
#: validated as :class:`PulsarDefaults`
PROFILE_KINDS = tuple(dict.fromkeys((*Source.model_fields, *Sink.model_fields)))
