"""A supervised worker child: ``python -m reliable.supervisor CONFIG_JSON`` (the supervisor starts it).

The child's code is `reliable.supervisor.child`; this entry point exists because the package imports
that module, so running it as ``python -m reliable.supervisor.child`` would execute it a second time
(Python warns: "found in sys.modules ... prior to execution").
"""

from __future__ import annotations

from .child import main

if __name__ == "__main__":
    main()
