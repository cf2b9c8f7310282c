"""``pulsarwire-admin``: Apache Pulsar's ``pulsar-admin`` everyday verbs over the admin REST API.

``python -m pulsarwire.admin`` (console script ``pulsarwire-admin``) takes pulsar-admin's global
options (``--admin-url``, ``--auth-plugin``, ``--auth-params``, the ``--tls-*`` options, a
``client.conf`` as first argument) and its ``tenants``, ``namespaces`` and ``topics`` verbs with
the same argument names, so scripts and runbooks written for a Pulsar cluster run against any
broker serving Pulsar's REST API v2 (ours with ``--http-port``, or Apache Pulsar's).

Modules: :mod:`.api` (the REST calls over :mod:`pulsarwire.io.http`, errors naming the URL, the
status and Pulsar's reason), :mod:`.messages` (peeked messages: Pulsar's X-Pulsar-* headers and
batches, printed as pulsar-admin prints them), :mod:`.cli` (argparse, output, exit codes).
"""

from __future__ import annotations
