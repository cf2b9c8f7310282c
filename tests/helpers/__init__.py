"""Shared test helpers (the recording fake broker for golden-bytes tests)."""
