"""Options shared by the ``pulsarwire`` source and sink: service URL and ``pulsar.client.*``.

Spark hands a data source its options as a case-insensitive map of strings.
:func:`client_settings` turns the connection part of it into the keyword
arguments of :class:`pulsarwire.client.blocking.Client`; the names follow the
Java client's ``ClientConfigurationData`` (``pulsar.client.operationTimeoutMs``
and so on), plus ``authToken`` / ``authTokenFile`` for token authentication.
Secrets are never put into error messages. Everything here is picklable data,
so executors rebuild their own client from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import OptionError

CLIENT_PREFIX = "pulsar.client."


def _bool(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no"):
        return False
    raise OptionError(name, f"expected true or false, got {value!r}")


def _int(name: str, value: str, minimum: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise OptionError(name, f"expected an integer, got {value!r}") from None
    if minimum is not None and n < minimum:
        raise OptionError(name, f"must be >= {minimum}, got {n}")
    return n


def opt_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    return default if value is None else _bool(name, value)


def opt_int(
    options: Mapping[str, str], name: str, default: int | None, minimum: int | None = None
) -> int | None:
    value = options.get(name)
    return default if value is None else _int(name, value, minimum)


#: pulsar.client.<key> -> (Client keyword, converter)
_CLIENT_KEYS: dict[str, tuple[str, str]] = {
    "operationtimeoutms": ("operation_timeout_seconds", "ms"),
    "connectiontimeoutms": ("connection_timeout_seconds", "ms"),
    "keepaliveintervalseconds": ("keepalive_interval_seconds", "float"),
    "tlstrustcertsfilepath": ("tls_trust_certs_file_path", "str"),
    "tlsallowinsecureconnection": ("tls_allow_insecure_connection", "bool"),
    "tlshostnameverificationenable": ("tls_validate_hostname", "bool"),
    "tlscertificatefilepath": ("tls_certificate_file_path", "str"),
    "tlskeyfilepath": ("tls_private_key_file_path", "str"),
    "authtoken": ("auth_token", "secret"),
    "authtokenfile": ("auth_token_file", "str"),
}


@dataclass(frozen=True)
class ClientSettings:
    """How to reach the cluster; rebuilt into a Client on the driver and on each executor."""

    service_url: str
    options: dict[str, Any] = field(default_factory=dict)
    auth_token: str | None = field(default=None, repr=False)
    auth_token_file: str | None = None

    def client(self) -> Any:
        """A new blocking :class:`pulsarwire.client.blocking.Client` (the caller closes it)."""
        from pulsarwire.client.auth import AuthenticationToken
        from pulsarwire.client.blocking import Client

        kw = dict(self.options)
        if self.auth_token is not None:
            kw["authentication"] = AuthenticationToken(self.auth_token)
        elif self.auth_token_file is not None:
            kw["authentication"] = AuthenticationToken("file:" + self.auth_token_file)
        return Client(self.service_url, **kw)


def client_settings(options: Mapping[str, str]) -> ClientSettings:
    """Read ``service.url`` and every ``pulsar.client.*`` option; unknown client keys are errors."""
    url = options.get("service.url")
    if not url:
        raise OptionError("service.url", "required (e.g. pulsar://localhost:6650)")
    if not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise OptionError("service.url", f"expected pulsar:// or pulsar+ssl://, got {url!r}")
    kw: dict[str, Any] = {}
    token: str | None = None
    token_file: str | None = None
    for name, value in options.items():
        if not name.lower().startswith(CLIENT_PREFIX):
            continue
        key = name[len(CLIENT_PREFIX) :].lower()
        if key not in _CLIENT_KEYS:
            known = ", ".join(sorted(CLIENT_PREFIX + k for k in _CLIENT_KEYS))
            raise OptionError(name, f"unknown client option (known: {known})")
        target, kind = _CLIENT_KEYS[key]
        if kind == "secret":
            token = value
        elif target == "auth_token_file":
            token_file = value
        elif kind == "ms":
            kw[target] = _int(name, value, 1) / 1000
        elif kind == "float":
            try:
                kw[target] = float(value)
            except ValueError:
                raise OptionError(name, f"expected a number, got {value!r}") from None
        elif kind == "bool":
            kw[target] = _bool(name, value)
        else:
            kw[target] = value
    if token is not None and token_file is not None:
        raise OptionError(CLIENT_PREFIX + "authToken", "give authToken or authTokenFile, not both")
    return ClientSettings(url, kw, token, token_file)
