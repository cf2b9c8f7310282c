"""spark-submit launcher for job files.

``spark-submit [--py-files dist/pulsarwire-*.whl] jobs/launch.py run jobs/x.yaml --env cluster``

spark-submit runs a file, not a module; this file hands its arguments to the ``pipelines``
command line (the same as ``python -m pipelines``). With ``--env cluster`` the runner joins
the session spark-submit created (``spark.session: existing`` in conf/cluster.yaml).
"""

from __future__ import annotations

import sys

from pipelines.jobs.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
