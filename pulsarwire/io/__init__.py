"""asyncio I/O: connections driving the sans-IO protocol, and the connection pool."""

from __future__ import annotations
