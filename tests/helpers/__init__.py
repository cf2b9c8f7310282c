"""Shared test helpers: the one place test modules import from (tests/test_layout.py checks it).

* ``judge`` — the official ``pulsar-client`` as the judge: unique topics, exact receives, payload sets.
* ``pw_client`` — the pulsarwire-client twins of ``judge``, comparable records, ``pw`` fixtures.
* ``pulsar_lite`` — pulsar-lite (a third-party broker) as the ``lite_url`` fixture.
* ``recorder`` / ``fake_broker`` — recording and scripted fake brokers built on our codec.
* ``raw`` / ``hostile`` — bare protocol connections, and the hostile-client suites' broker process.
* ``broker_cli`` — ``python -m pulsarwire.broker`` as its users start it.
* ``protocol`` — frames a broker would send, for the sans-IO ClientProtocol tests.
* ``oauth2_issuer`` — a local OAuth2 issuer.
* ``ingest_job`` — the exactly-once Pulsar → Delta job of the crash tests (also a ``-m`` script).
* ``examples`` — hypothesis profiles (``ci`` / ``dev``) and scaled example counts.
"""
