"""Every check sparkbase runs, each a pure function of (expected, facts, item).

Ids read as the drift they name. One module per area (after the prior `doctor`);
importing this package registers them all, in the order below (the report order).
"""

from __future__ import annotations

from sparkbase.audit.checks import (
    fabric,  # noqa: F401 - registers on import
    files,  # noqa: F401 - registers on import
    fleet,  # noqa: F401 - registers on import
    gpu,  # noqa: F401 - registers on import
    host,  # noqa: F401 - registers on import
    kernel,  # noqa: F401 - registers on import
    memory,  # noqa: F401 - registers on import
    nccl,  # noqa: F401 - registers on import
    packages,  # noqa: F401 - registers on import
    secure_boot,  # noqa: F401 - registers on import
    tuning,  # noqa: F401 - registers on import
)
