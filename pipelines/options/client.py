"""Client settings: ``service.url`` and the ``pulsar.client.*`` options of the source and the sink.

:class:`ClientFields` are the settings a job file's ``client:`` section and Spark's
``pulsar.client.*`` options share; the names follow the Java client's
``ClientConfigurationData`` (``pulsar.client.operationTimeoutMs`` and so on), plus
``authToken`` / ``authTokenFile`` for token authentication. :class:`ClientOptions` adds the
connector-style ``authPluginClassName`` + ``authParams`` (:mod:`pipelines.options.auth`:
OAuth2, token, basic, TLS) that a job writes as ``auth:``.

:class:`ClientSettings` is what a process needs to open a
:class:`pulsarwire.client.blocking.Client`: picklable data, so executors rebuild their own
client from it. :func:`client_settings` reads it from any option map (``service.url`` and
every ``pulsar.client.*`` option; other options are left to their owner). Secrets are never
put into error messages. This module does not import Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import BeforeValidator, SecretStr, ValidationInfo, model_validator

from pipelines.errors import OptionError
from pipelines.options.auth import AuthSpec, parse_auth
from pipelines.options.grammar import show
from pipelines.options.migration import java_client_hint
from pipelines.options.model import (
    Flag,
    OptionsModel,
    PosInt,
    PosNumber,
    Secret,
    Text,
    label,
    option,
    problem,
)
from pulsarwire import AuthenticationToken, Client

CLIENT_PREFIX = "pulsar.client."

_URL = re.compile(r"pulsar(\+ssl)?://[^/\s:]+(:\d+)?(,[^/\s:]+(:\d+)?)*/?")


def _url(value: Any) -> Any:
    if isinstance(value, str) and not _URL.fullmatch(value.strip()):
        raise problem(f"expected pulsar://host:port or pulsar+ssl://host:port, got {show(value)}")
    return value.strip() if isinstance(value, str) else value


ServiceUrl = Annotated[str, BeforeValidator(_url)]


class ClientFields(OptionsModel):
    """Client settings of a job's ``client:`` section and of Spark's ``pulsar.client.*``."""

    auth_token: Secret | None = option(
        None,
        spark="authToken",
        doc="token authentication: the token (a secret)",
    )
    auth_token_file: Text | None = option(
        None,
        spark="authTokenFile",
        doc="token authentication: a file holding the token (not together with `authToken`)",
    )
    operation_timeout_ms: PosInt | None = option(
        None, spark="operationTimeoutMs", doc="timeout of a client operation"
    )
    connection_timeout_ms: PosInt | None = option(
        None, spark="connectionTimeoutMs", doc="timeout of a TCP connection"
    )
    keep_alive_interval_seconds: PosNumber | None = option(
        None,
        spark="keepAliveIntervalSeconds",
        doc="ping interval of a connection",
    )
    tls_trust_certs_file_path: Text | None = option(
        None, spark="tlsTrustCertsFilePath", doc="CA certificates (PEM)"
    )
    tls_allow_insecure_connection: Flag | None = option(
        None,
        spark="tlsAllowInsecureConnection",
        doc="accept any server certificate",
    )
    tls_hostname_verification_enable: Flag | None = option(
        None,
        spark="tlsHostnameVerificationEnable",
        doc="check the server certificate's host name",
    )
    tls_certificate_file_path: Text | None = option(
        None, spark="tlsCertificateFilePath", doc="client certificate (PEM)"
    )
    tls_key_file_path: Text | None = option(None, spark="tlsKeyFilePath", doc="client private key (PEM)")

    @model_validator(mode="after")
    def _tokens(self, info: ValidationInfo) -> ClientFields:
        if self.auth_token is not None and self.auth_token_file is not None:
            token, file = (label(info, type(self), n) for n in ("auth_token", "auth_token_file"))
            raise problem(f"give {token} or {file}, not both", "auth_token_file")
        return self

    @classmethod
    def unknown(cls, key: str) -> OptionError:
        known = ", ".join(CLIENT_PREFIX + a for a in cls.spark_names().values())
        java = java_client_hint(key.rsplit(".", 1)[-1])  # StreamNative's connector passes them on
        return OptionError(key, f"{java or 'unknown client option'} (known: {known})")


class ClientOptions(ClientFields):
    """Spark's ``pulsar.client.*`` options: the shared settings plus connector-style authentication."""

    auth_plugin_class_name: str | None = option(
        None,
        spark="authPluginClassName",
        doc="the Java class of the authentication plugin (OAuth2, token, basic, TLS)",
    )
    auth_params: SecretStr | None = option(None, spark="authParams", doc="the plugin's parameters (a secret)")

    @model_validator(mode="after")
    def _one_auth(self) -> ClientOptions:
        if self.auth_plugin_class_name is not None and (
            self.auth_token is not None or self.auth_token_file is not None
        ):
            raise problem(
                "give authPluginClassName or authToken/authTokenFile, not both", "auth_plugin_class_name"
            )
        return self

    def settings(self, service_url: str) -> ClientSettings:
        """The settings of a client of ``service_url``. Raises OptionError for bad ``auth*`` options."""
        kw: dict[str, Any] = {}
        if self.operation_timeout_ms is not None:
            kw["operation_timeout_seconds"] = self.operation_timeout_ms / 1000
        if self.connection_timeout_ms is not None:
            kw["connection_timeout_seconds"] = self.connection_timeout_ms / 1000
        if self.keep_alive_interval_seconds is not None:
            kw["keepalive_interval_seconds"] = self.keep_alive_interval_seconds
        if self.tls_trust_certs_file_path is not None:
            kw["tls_trust_certs_file_path"] = self.tls_trust_certs_file_path
        if self.tls_allow_insecure_connection is not None:
            kw["tls_allow_insecure_connection"] = self.tls_allow_insecure_connection
        if self.tls_hostname_verification_enable is not None:
            kw["tls_validate_hostname"] = self.tls_hostname_verification_enable
        if self.tls_certificate_file_path is not None:
            kw["tls_certificate_file_path"] = self.tls_certificate_file_path
        if self.tls_key_file_path is not None:
            kw["tls_private_key_file_path"] = self.tls_key_file_path
        params = self.auth_params.get_secret_value() if self.auth_params is not None else None
        auth = parse_auth(self.auth_plugin_class_name, params)
        token = self.auth_token.get_secret_value() if self.auth_token is not None else None
        return ClientSettings(service_url, kw, token, self.auth_token_file, auth)


class Connection(OptionsModel):
    """``service.url`` and the client options: what :func:`client_settings` reads."""

    service_url: ServiceUrl = option(
        spark="service.url",
        doc="`pulsar://host:port` or `pulsar+ssl://host:port`, several hosts comma-separated",
    )
    client: ClientOptions = option(
        default_factory=ClientOptions,
        spark=CLIENT_PREFIX,
        doc="client settings (`operationTimeoutMs`, TLS, `authToken`, "
        "`authPluginClassName` + `authParams`, ...)",
    )

    def client_settings(self) -> ClientSettings:
        """The settings of a client of this connection. Raises OptionError for bad ``auth*`` options."""
        return self.client.settings(self.service_url)


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster; rebuilt into a Client on the driver and on each executor."""

    service_url: str
    options: dict[str, Any] = field(default_factory=dict)
    auth_token: str | None = field(default=None, repr=False)
    auth_token_file: str | None = None
    auth: AuthSpec | None = field(default=None, repr=False)

    def client(self) -> Any:
        """A new blocking :class:`pulsarwire.client.blocking.Client` (the caller closes it)."""

        kw = dict(self.options)
        if self.auth_token is not None:
            kw["authentication"] = AuthenticationToken(self.auth_token)
        elif self.auth_token_file is not None:
            kw["authentication"] = AuthenticationToken("file:" + self.auth_token_file)
        elif self.auth is not None:
            provider, extra = self.auth.build()
            if provider is not None:
                kw["authentication"] = provider
            kw.update(extra)
        return Client(self.service_url, **kw)


def client_settings(options: Mapping[str, str]) -> ClientSettings:
    """Read ``service.url`` and every ``pulsar.client.*`` option of a Spark option map.

    Other options are ignored (they belong to the source or the sink). Raises OptionError.
    """
    own = {
        k: v for k, v in options.items() if k.lower() == "service.url" or k.lower().startswith(CLIENT_PREFIX)
    }
    return Connection.from_spark(own).client_settings()
