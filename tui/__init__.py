"""Olifant terminal UI (see issue: Textual UI)."""
