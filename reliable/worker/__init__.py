"""Everything that runs inside a producer or worker process, for Dramatiq (see reliable/middleware.py)."""
