"""Loaded by every Python process of the compatibility run (its directory is on PYTHONPATH)."""

import os

if os.environ.get("RELIABLE_COMPAT_STORE"):
    import reliable_compat_patch

    reliable_compat_patch.apply()
