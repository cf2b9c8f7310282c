"""pipelines: YAML-defined PySpark jobs reading from and writing to Pulsar through pulsarwire.

The Spark data source, sinks, Delta offset store, job models, runner and CLI
live here (they arrive with the Spark connector and pipelines issues).
"""

from __future__ import annotations
