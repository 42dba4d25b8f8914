"""Points in time as a pipelines file and the command line give them: ISO 8601 with a zone
(`2026-11-29T08:00:00Z`, `...+01:00`), or TOML's unquoted date-time. A time without a zone is
refused: the broker's record times are UTC, and a guess would move the point by hours."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

EXAMPLE = "2026-11-29T08:00:00Z"


def parse_time(value: Any) -> str:
    """The time as ISO 8601 text; ValueError saying why it is not one."""
    if isinstance(value, datetime):  # a TOML date-time, unquoted
        value = value.isoformat()
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an ISO 8601 time with its zone (e.g. '{EXAMPLE}')")
    try:
        at = iso_datetime(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO 8601 time with its zone (e.g. '{EXAMPLE}')"
        ) from None
    if at.tzinfo is None:
        raise ValueError(f"{value!r} has no time zone: add Z or +hh:mm")
    return value


def time_ms(value: str) -> int:
    """Epoch milliseconds of a time parse_time accepted."""
    return int(iso_datetime(value).timestamp() * 1000)


# Python 3.10's fromisoformat reads only 3 or 6 digits of a fraction; Debezium and users write
# any number (`.5`, nanoseconds).
_FRACTION = re.compile(r"([T ]\d\d:\d\d:\d\d)\.(\d+)")


def iso_datetime(value: str) -> datetime:
    """datetime.fromisoformat as Python 3.11 reads it, on 3.10 too: a `Z` zone, a fraction of
    any length (to microseconds, truncated)."""
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    value = _FRACTION.sub(lambda m: f"{m[1]}.{m[2][:6].ljust(6, '0')}", value, count=1)
    return datetime.fromisoformat(value)
