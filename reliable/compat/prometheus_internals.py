"""prometheus_client's private marker of multiprocess values.

`values.ValueClass` is `MutexValue` (in-process) or the class `MultiProcessValue()` builds, told
apart by their class attribute `_multiprocess`: read in prometheus_client 0.20.0, 0.21.0, 0.22.0,
0.23.0, 0.24.0 and 0.25.0 (tags), tested on the installed 0.26. Fallback: any value class but
`MutexValue` counts as multiprocess.
"""

from __future__ import annotations

from importlib.metadata import version

from prometheus_client import values

from . import release

__all__ = ["PROMETHEUS_VERIFIED", "VERIFIED_PROMETHEUS", "multiprocess_values"]

#: The prometheus_client releases whose value classes carry `_multiprocess`.
VERIFIED_PROMETHEUS = frozenset({"0.20", "0.21", "0.22", "0.23", "0.24", "0.25", "0.26"})
#: The installed prometheus_client is one of them.
PROMETHEUS_VERIFIED = release(version("prometheus-client")) in VERIFIED_PROMETHEUS


def multiprocess_values() -> bool:
    """Whether collectors created now keep their values in the multiprocess directory."""
    if PROMETHEUS_VERIFIED:
        return bool(getattr(values.ValueClass, "_multiprocess", False))
    return values.ValueClass is not values.MutexValue
