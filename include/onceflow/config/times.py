"""Points in time as a pipelines file and the command line give them: ISO 8601 with a zone
(`2026-11-29T08:00:00Z`, `...+01:00`), or TOML's unquoted date-time. A time without a zone is
refused: the broker's record times are UTC, and a guess would move the point by hours."""

from __future__ import annotations

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


def iso_datetime(value: str) -> datetime:
    """datetime.fromisoformat, also for a `Z` zone on Python 3.10 (3.11 reads it itself)."""
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    return datetime.fromisoformat(value)
