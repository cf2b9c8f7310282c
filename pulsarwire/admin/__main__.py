"""``python -m pulsarwire.admin``: see :mod:`pulsarwire.admin.cli`."""

from __future__ import annotations

import sys

from pulsarwire.admin.cli import main

if __name__ == "__main__":
    sys.exit(main())
