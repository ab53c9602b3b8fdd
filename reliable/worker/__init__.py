"""Everything that runs inside a producer or worker process, for Dramatiq (see docs/architecture.md)."""
