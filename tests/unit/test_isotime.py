"""reliable.isotime: the one writer and reader of ISO 8601 times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from reliable.isotime import format_time, parse_time_text

MOMENT = datetime(2026, 12, 3, 12, 8, 46, 123456, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("epoch", "ms", "expected"), [
    (MOMENT, False, "2026-12-03T12:08:46Z"),
    (MOMENT, True, "2026-12-03T12:08:46.123Z"),
    (str(MOMENT), True, "2026-12-03T12:08:46.123Z"),  # a string of a number, as some rows carry it
    (0, False, "1970-01-01T00:00:00Z"),
    (None, False, None),
    (None, True, None),
])
def test_format_time(epoch: float | str | None, ms: bool, expected: str | None) -> None:
    assert format_time(epoch, ms=ms) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("2026-06-01T12:00:00Z", datetime(2026, 6, 1, 12, tzinfo=UTC)),
    (" 2026-06-01T12:00:00 ", datetime(2026, 6, 1, 12, tzinfo=UTC)),  # UTC unless an offset is given
    ("2026-06-01", datetime(2026, 6, 1, tzinfo=UTC)),
    ("2026-06-01T14:00:00+02:00", datetime(2026, 6, 1, 14, tzinfo=timezone(timedelta(hours=2)))),
])
def test_parse_time_text(text: str, expected: datetime) -> None:
    moment = parse_time_text(text)
    assert moment == expected and moment.tzinfo is not None


def test_a_written_time_reads_back() -> None:
    assert parse_time_text(format_time(MOMENT, ms=True)).timestamp() == pytest.approx(MOMENT, abs=1e-3)


def test_bad_text_states_the_forms() -> None:
    with pytest.raises(ValueError, match=r"'yesterday' is not an ISO 8601 time \(2026-06-01T12:00:00Z; UTC unless"):
        parse_time_text("yesterday")
