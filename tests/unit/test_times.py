"""Points in time (onceflow.config.times) read alike on every supported Python."""

from __future__ import annotations

import pytest
from onceflow.config.times import iso_datetime, parse_time

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("2026-11-29T08:00:00.5+01:00", 500_000),
        ("2026-11-29T08:00:00.12Z", 120_000),
        ("2026-11-29T08:00:00.123456789Z", 123_456),  # nanoseconds, truncated
        ("2026-11-29 08:00:00.1234+00:00", 123_400),
    ],
)
def test_a_fraction_of_any_length_is_read_to_microseconds(text: str, micros: int) -> None:
    at = iso_datetime(text)
    assert at.microsecond == micros
    assert at.utcoffset() is not None


def test_a_time_without_a_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        parse_time("2026-11-29T08:00:00.5")
