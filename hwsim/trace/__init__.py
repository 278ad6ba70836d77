"""Timing traces: the records a run produces, and their exports (Chrome JSON, tables)."""
