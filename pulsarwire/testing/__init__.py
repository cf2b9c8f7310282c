"""Test support for users of pulsarwire: a pytest plugin with a ``pulsar_broker`` fixture.

The plugin is registered through the ``pytest11`` entry point, so any project
that installs pulsarwire (with the ``test`` extra for pytest) gets the
fixtures without a conftest import.
"""
