"""The client side of pulsarwire: retry policy, authentication providers and partition routing.

Modules here only decide (how long to wait, what credential to send, which
partition gets a message); the connection and producer machinery that acts on
those decisions lives beside them.
"""

from __future__ import annotations
