"""Connector-style authentication options: ``authPluginClassName`` + ``authParams``.

StreamNative's Spark connector (and every Java client configuration) names the credential by
the Java class of its plugin and hands it a parameter string; jobs written for it carry
``pulsar.client.authPluginClassName`` and ``pulsar.client.authParams``. :func:`parse_auth`
reads that pair into an :class:`AuthSpec` (validated on the driver, before Spark starts) and
:meth:`AuthSpec.build` turns it into pulsarwire's provider on whichever process needs a client.

The plugins, their parameters and how ``authParams`` is read (a JSON object or the Java
clients' ``key1:value1,key2:value2``) are :mod:`pulsarwire.client.plugins`' — the same rules as
``pulsarwire-admin``'s ``--auth-plugin``; here only the Java class names are taken. Errors name
the option and the key, never a value: ``authParams`` holds secrets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipelines.errors import OptionError
from pulsarwire import PluginError, build_plugin, check_plugin

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


@dataclass(frozen=True)
class AuthSpec:
    """A validated credential: ``kind`` (oauth2, token, basic, tls) and its parameters (never shown)."""

    kind: str
    params: dict[str, str] = field(default_factory=dict, repr=False)

    def build(self) -> tuple[Any, dict[str, Any]]:
        """The pulsarwire provider and extra Client keywords (TLS: the certificate files).

        Raises OptionError naming authParams when the parameters make no credential."""
        try:
            made = build_plugin(self.kind, self.params)
        except PluginError as exc:
            raise OptionError(PARAMS_OPTION, str(exc)) from None
        if made.provider is not None:
            return made.provider, {}
        return None, {
            "tls_certificate_file_path": made.tls_cert_file,
            "tls_private_key_file_path": made.tls_key_file,
        }


def parse_auth(plugin: str | None, params: str | None) -> AuthSpec | None:
    """Validate the connector-style pair (:func:`pulsarwire.client.plugins.check_plugin`, only
    the Java class names); None when neither is given. Raises OptionError."""
    if plugin is None:
        if params is not None:
            raise OptionError(PARAMS_OPTION, f"needs {PLUGIN_OPTION}")
        return None
    if plugin.strip() not in PLUGINS:
        raise OptionError(PLUGIN_OPTION, f"unsupported plugin {plugin!r} (supported: {', '.join(PLUGINS)})")
    try:
        kind, values = check_plugin(plugin, params)
    except PluginError as exc:
        raise OptionError(PLUGIN_OPTION if exc.about == "plugin" else PARAMS_OPTION, str(exc)) from None
    return AuthSpec(kind, values)
