"""``python -m pipelines ...``: the ``pipelines`` command (see :mod:`pipelines.command`).

Absolute import, so that ``spark-submit pipelines/__main__.py run ...`` works too.
"""

from __future__ import annotations

import sys

from pipelines.command import main

if __name__ == "__main__":
    sys.exit(main())
