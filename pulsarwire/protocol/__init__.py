"""Sans-IO protocol layer: connection state machine and state tables shared by the client."""

from __future__ import annotations
