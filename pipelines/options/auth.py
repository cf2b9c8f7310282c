"""Connector-style authentication options: ``authPluginClassName`` + ``authParams``.

StreamNative's Spark connector (and every Java client configuration) names the credential by
the Java class of its plugin and hands it a parameter string; jobs written for it carry
``pulsar.client.authPluginClassName`` and ``pulsar.client.authParams``. :func:`parse_auth`
reads that pair into an :class:`AuthSpec` (validated on the driver, before Spark starts) and
:meth:`AuthSpec.build` turns it into pulsarwire's provider on whichever process needs a client.

* ``org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2`` (oauth2): ``issuerUrl``,
  ``privateKey`` (the credentials file), ``audience``, ``scope``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationToken`` (token): ``token:<jwt>``,
  ``file:<path>``, the token itself, or ``{"token": ...}``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationBasic`` (basic): ``userId``, ``password``;
* ``org.apache.pulsar.client.impl.auth.AuthenticationTls`` (tls): ``tlsCertFile``, ``tlsKeyFile``.

``authParams`` is a JSON object or the Java clients' ``key1:value1,key2:value2`` form (each item
split at its first ``:``, so values may hold ``:`` as URLs do), as Pulsar's
``AuthenticationUtil.configureFromPulsar1AuthParamString`` reads it; the OAuth2 keys are also
taken in the Python/C++ spelling (``issuer_url``, ``private_key``). Errors name the option and
the key, never a value: ``authParams`` holds secrets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pipelines.errors import OptionError
from pulsarwire import AuthenticationBasic, AuthenticationOauth2, AuthenticationToken

PLUGIN_OPTION = "pulsar.client.authPluginClassName"
PARAMS_OPTION = "pulsar.client.authParams"

_JAVA = "org.apache.pulsar.client.impl.auth."
#: Java plugin class -> kind
PLUGINS = {
    _JAVA + "oauth2.AuthenticationOAuth2": "oauth2",
    _JAVA + "AuthenticationToken": "token",
    _JAVA + "AuthenticationBasic": "basic",
    _JAVA + "AuthenticationTls": "tls",
}
#: kind -> the Java class (what a job profile's ``auth:`` becomes)
CLASS_OF = {kind: name for name, kind in PLUGINS.items()}
#: other spellings of the OAuth2 keys -> the Java one
_OAUTH2_ALIASES = {"issuer_url": "issuerUrl", "private_key": "privateKey"}
_REQUIRED = {
    "oauth2": ("issuerUrl", "privateKey"),
    "basic": ("userId", "password"),
    "tls": ("tlsCertFile", "tlsKeyFile"),
}


def parse_params(text: str) -> dict[str, str]:
    """``authParams`` as a mapping: a JSON object, or ``key:value,...``.

    Raises ValueError (its message quotes no value).
    """
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            raise ValueError("not valid JSON") from None
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        out: dict[str, str] = {}
        for key, value in doc.items():
            if not isinstance(value, str | int | float) or isinstance(value, bool):
                raise ValueError(f"key {key!r}: expected a string")
            out[str(key)] = str(value)
        return out
    params: dict[str, str] = {}
    for item in stripped.split(","):
        key, sep, value = item.partition(":")
        if not sep or not key.strip():
            raise ValueError("expected a JSON object or key:value,key:value")
        params[key.strip()] = value.strip()
    return params


@dataclass(frozen=True)
class AuthSpec:
    """A validated credential: ``kind`` (oauth2, token, basic, tls) and its parameters (never shown)."""

    kind: str
    params: dict[str, str] = field(default_factory=dict, repr=False)

    def build(self) -> tuple[Any, dict[str, Any]]:
        """The pulsarwire provider and extra Client keywords (TLS: the certificate files)."""

        p = self.params
        if self.kind == "oauth2":
            auth = AuthenticationOauth2(
                issuer_url=p["issuerUrl"],
                private_key=p["privateKey"],
                audience=p.get("audience") or None,
                scope=p.get("scope") or None,
            )
            return auth, {}
        if self.kind == "token":
            return AuthenticationToken(p["token"]), {}
        if self.kind == "basic":
            return AuthenticationBasic(p["userId"], p["password"]), {}
        return None, {
            "tls_certificate_file_path": p["tlsCertFile"],
            "tls_private_key_file_path": p["tlsKeyFile"],
        }


def parse_auth(plugin: str | None, params: str | None) -> AuthSpec | None:
    """Validate the connector-style pair; None when neither is given. Raises OptionError."""
    if plugin is None:
        if params is not None:
            raise OptionError(PARAMS_OPTION, f"needs {PLUGIN_OPTION}")
        return None
    kind = PLUGINS.get(plugin.strip())
    if kind is None:
        raise OptionError(PLUGIN_OPTION, f"unsupported plugin {plugin!r} (supported: {', '.join(PLUGINS)})")
    if params is None or not params.strip():
        raise OptionError(PARAMS_OPTION, f"required with {plugin}")
    if kind == "token":
        return AuthSpec(kind, {"token": _token_param(params)})
    try:
        parsed = parse_params(params)
    except ValueError as exc:
        raise OptionError(PARAMS_OPTION, str(exc)) from None
    if kind == "oauth2":
        parsed = {_OAUTH2_ALIASES.get(k, k): v for k, v in parsed.items()}
        parsed.pop("type", None)  # "client_credentials", the only flow
    missing = [k for k in _REQUIRED[kind] if not parsed.get(k)]
    if missing:
        raise OptionError(PARAMS_OPTION, f"{plugin} needs {', '.join(missing)}")
    return AuthSpec(kind, parsed)


def _token_param(params: str) -> str:
    """AuthenticationToken's parameter: ``token:...``, ``file:...``, the token, or ``{"token": ...}``."""
    text = params.strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            raise OptionError(PARAMS_OPTION, "not valid JSON") from None
        token = doc.get("token") if isinstance(doc, dict) else None
        if not isinstance(token, str) or not token.strip():
            raise OptionError(PARAMS_OPTION, 'expected {"token": "..."}')
        return token
    return text
