"""The Java clients' authentication plugins by name: ``authPlugin`` + ``authParams``.

``pulsar-admin``, ``pulsar-client`` and their ``client.conf`` name a credential by the Java class
of its plugin and hand it one parameter string (``--auth-plugin
org.apache.pulsar.client.impl.auth.AuthenticationToken --auth-params token:...``).
:func:`from_plugin` reads that pair into a :class:`PluginAuth` (:func:`check_plugin` then
:func:`build_plugin`, for a caller that validates first and builds later): pulsarwire's provider (token,
basic, OAuth2) or the client certificate files (TLS).

* ``...AuthenticationToken``: ``token:<jwt>``, ``file:<path>`` (read on every use), the token
  itself, or ``{"token": ...}``;
* ``...AuthenticationBasic``: ``userId``, ``password``;
* ``...oauth2.AuthenticationOAuth2``: ``issuerUrl``, ``privateKey`` (the credentials file),
  ``audience``, ``scope``;
* ``...AuthenticationTls``: ``tlsCertFile``, ``tlsKeyFile``.

The short names ``token``, ``basic``, ``oauth2`` and ``tls`` are taken too. ``authParams`` other
than a token's is a JSON object or the Java clients' ``key1:value1,key2:value2`` (each item split
at its first ``:``, so values may hold ``:``), as Pulsar's
``AuthenticationUtil.configureFromPulsar1AuthParamString`` reads it. Errors
(:class:`PluginError`) name the plugin and the key, never a value: ``authParams`` holds secrets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pulsarwire.errors import AuthenticationError, PulsarWireError

from .auth import Authentication, AuthenticationBasic, AuthenticationToken

_JAVA = "org.apache.pulsar.client.impl.auth."
#: plugin class (or short name) -> kind
PLUGINS = {
    _JAVA + "AuthenticationToken": "token",
    _JAVA + "AuthenticationBasic": "basic",
    _JAVA + "oauth2.AuthenticationOAuth2": "oauth2",
    _JAVA + "AuthenticationTls": "tls",
    "token": "token",
    "basic": "basic",
    "oauth2": "oauth2",
    "tls": "tls",
}
_REQUIRED = {
    "basic": ("userId", "password"),
    "oauth2": ("issuerUrl", "privateKey"),
    "tls": ("tlsCertFile", "tlsKeyFile"),
}
_OAUTH2_ALIASES = {"issuer_url": "issuerUrl", "private_key": "privateKey"}


class PluginError(PulsarWireError, ValueError):
    """An ``authPlugin`` / ``authParams`` pair that does not make a credential; ``about`` says
    which of the two is wrong (``"plugin"`` or ``"params"``)."""

    def __init__(self, message: str, about: str = "params") -> None:
        super().__init__(message)
        self.about = about


@dataclass(frozen=True)
class PluginAuth:
    """A credential: a provider (token, basic, OAuth2) or client certificate files (TLS)."""

    provider: Authentication | None = field(default=None, repr=False)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None


def parse_params(text: str) -> dict[str, str]:
    """``authParams`` as a mapping: a JSON object (string or number values), or
    ``key:value,...``. Raises PluginError (its message quotes no value)."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            raise PluginError("authParams is not valid JSON") from None
        if not isinstance(doc, dict):
            raise PluginError("authParams is not a JSON object")
        out: dict[str, str] = {}
        for key, value in doc.items():
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise PluginError(f"authParams key {key!r}: expected a string")
            out[str(key)] = str(value)
        return out
    params: dict[str, str] = {}
    for item in stripped.split(","):
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise PluginError("authParams must be a JSON object or key:value,key:value")
        params[key.strip()] = value.strip()
    return params


def check_plugin(plugin: str, params: str | None) -> tuple[str, dict[str, str]]:
    """The kind (token, basic, oauth2, tls) and the checked parameters of an ``authPlugin`` and
    its ``authParams``, without building anything (a token's under ``token``; OAuth2's keys in
    the Java spelling). Raises PluginError."""
    kind = PLUGINS.get(plugin.strip())
    if kind is None:
        known = ", ".join(k for k in PLUGINS if "." in k)
        raise PluginError(f"unsupported auth plugin {plugin!r} (supported: {known})", "plugin")
    if not params or not params.strip():
        raise PluginError(f"auth params required with {plugin}")
    if kind == "token":
        return kind, {"token": _token_param(params)}
    values = parse_params(params)
    if kind == "oauth2":
        values = {_OAUTH2_ALIASES.get(k, k): v for k, v in values.items()}
        values.pop("type", None)  # "client_credentials", the only flow
    missing = [k for k in _REQUIRED[kind] if not values.get(k)]
    if missing:
        raise PluginError(f"{plugin} needs {', '.join(missing)} in its auth params")
    return kind, values


def build_plugin(kind: str, values: dict[str, str]) -> PluginAuth:
    """The credential of checked parameters (:func:`check_plugin`). Raises PluginError."""
    try:
        if kind == "token":
            return PluginAuth(AuthenticationToken(values["token"]))
        if kind == "basic":
            return PluginAuth(AuthenticationBasic(values["userId"], values["password"]))
        if kind == "oauth2":
            from .oauth2 import AuthenticationOauth2  # its HTTP machinery only when asked for

            return PluginAuth(
                AuthenticationOauth2(
                    issuer_url=values["issuerUrl"],
                    private_key=values["privateKey"],
                    audience=values.get("audience") or None,
                    scope=values.get("scope") or None,
                )
            )
    except (AuthenticationError, ValueError) as exc:
        raise PluginError(f"{kind}: {exc}") from None
    return PluginAuth(tls_cert_file=values["tlsCertFile"], tls_key_file=values["tlsKeyFile"])


def from_plugin(plugin: str, params: str | None) -> PluginAuth:
    """The credential of an ``authPlugin`` and its ``authParams``; raises PluginError."""
    return build_plugin(*check_plugin(plugin, params))


def _token_param(params: str) -> str:
    """AuthenticationToken's parameter: ``token:...``, ``file:...``, the token, or ``{"token": ...}``."""
    text = params.strip()
    if not text.startswith("{"):
        return text
    try:
        doc = json.loads(text)
    except ValueError:
        raise PluginError("authParams is not valid JSON") from None
    token = doc.get("token") if isinstance(doc, dict) else None
    if not isinstance(token, str) or not token.strip():
        raise PluginError('authParams for a token must be token:..., file:... or {"token": "..."}')
    return token
