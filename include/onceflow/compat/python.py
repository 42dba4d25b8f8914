"""What Onceflow uses of Python 3.11 that 3.10 lacks, in one place: `tomllib` (the `tomli`
backport on 3.10, a dependency there) and `StrEnum`. Everything else the code uses is in 3.10
(`requires-python`; ruff's target)."""

from __future__ import annotations

import sys
from enum import Enum

if sys.version_info >= (3, 11):
    from enum import StrEnum

    import tomllib
else:  # pragma: no cover - exercised by the compatibility matrix's Python 3.10 cell
    import tomli as tomllib

    class StrEnum(str, Enum):
        """3.11's StrEnum: members are their values, also in str() and format()."""

        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


__all__ = ["StrEnum", "tomllib"]
