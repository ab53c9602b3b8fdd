"""reliable.tracebacks and reliable.redact.redact_secrets: what a failed attempt's traceback keeps."""

from __future__ import annotations

import re
import sys
import traceback
from collections.abc import Callable

import pytest

from reliable.redact import MASK, redact_secrets
from reliable.tracebacks import DRAMATIQ_FRAMES, MAX_TRACEBACK, bound_text, failure_texts, failure_traceback


@pytest.mark.parametrize(("text", "expected"), [
    ("connect postgresql://app:hunter2@db/prod failed", f"connect postgresql://app:{MASK}@db/prod failed"),
    ("dsn host=db password=hunter2 user=app", f"dsn host=db password={MASK} user=app"),
    ("token=abc123, retry later", f"token={MASK}, retry later"),
    ("api_key: sk-live-9 rejected", f"api_key: {MASK} rejected"),
    ("{'access_token': 'abc', 'n': 1}", f"{{'access_token': '{MASK}', 'n': 1}}"),
    ('{"client_secret": "xyz"}', f'{{"client_secret": "{MASK}"}}'),
    ("Authorization: Bearer eyJhbGci.x.y", f"Authorization: Bearer {MASK}"),
    ("GET /v1?X-Api-Key=k1&page=2", f"GET /v1?X-Api-Key={MASK}&page=2"),
    ("DB_PASSWORD=s3cret ./run", f"DB_PASSWORD={MASK} ./run"),
])
def test_secret_values_are_masked_and_the_rest_of_the_line_kept(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize("text", [
    "reliable.errors.TokenError: expired",          # a class named like a secret is not a key
    "PasswordExpired: user alice",
    "token_count=5 over budget",
    "if token == expected:",
    "    if password:\n        return 1",             # never reaches the next line
])
def test_words_that_only_contain_a_secret_name_are_left_alone(text: str) -> None:
    assert redact_secrets(text) == text


def test_bound_text_keeps_head_and_tail_and_says_how_much_was_cut() -> None:
    text = "H" * 10_000 + "M" * 50_000 + "T" * 10_000
    bounded = bound_text(text, 16_384)
    assert len(bounded) <= 16_384
    assert bounded.startswith("H" * 6_000) and bounded.endswith("T" * 10_000)
    head, cut, tail = re.fullmatch(r"([HM]+)\n\.\.\. \[(\d+) characters cut\] \.\.\.\n([MT]+)", bounded).groups()  # type: ignore[union-attr]
    assert len(head) + int(cut) + len(tail) == len(text)
    assert bound_text("short", 16_384) == "short"


def _raise_chained() -> None:
    try:
        raise ConnectionRefusedError("postgresql://app:hunter2@db.internal/prod refused")
    except OSError as exc:
        raise ValueError("could not load the account (api_key=sk-live-123)") from exc


def test_failure_traceback_has_the_chain_masked() -> None:
    with pytest.raises(ValueError) as info:
        _raise_chained()
    text = failure_traceback(info.value)
    assert "ConnectionRefusedError: postgresql://app:***@db.internal/prod refused" in text
    assert "The above exception was the direct cause of the following exception" in text
    assert text.rstrip().endswith("ValueError: could not load the account (api_key=***)")
    assert "hunter2" not in text and "sk-live-123" not in text


def test_failure_traceback_of_megabytes_is_bounded_and_keeps_the_exception_line() -> None:
    secret_tail = "password=hunter2 " + "z" * 2_000_000 + " token=tail-secret end"
    try:
        raise RuntimeError(secret_tail)
    except RuntimeError as exc:
        text = failure_traceback(exc)
    assert len(text) <= MAX_TRACEBACK
    assert "characters cut] ...\n" in text
    assert text.startswith("Traceback (most recent call last):")
    assert text.rstrip().endswith(f"token={MASK} end")
    assert "hunter2" not in text and "tail-secret" not in text


def test_failure_traceback_survives_an_unprintable_exception() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    try:
        raise Broken()
    except Broken as exc:
        text = failure_traceback(exc)
    assert "Broken" in text and "\x00" not in text


def _recurse(depth: int) -> None:
    if depth == 0:
        raise KeyError("innermost")
    _recurse(depth - 1)


def _caught(make: Callable[[], None]) -> BaseException:
    try:
        make()
    except BaseException as exc:  # the test wants whatever it raised
        return exc
    raise AssertionError("nothing was raised")


def _group() -> None:
    raise ExceptionGroup("two", [_caught(lambda: _recurse(40)), _caught(_raise_chained)])


@pytest.mark.parametrize("make", [_raise_chained, lambda: _recurse(3), lambda: _recurse(45), _group],
                         ids=["chained", "shallow", "deeper-than-30", "group-with-a-deep-member"])
def test_failure_texts_match_dramatiq_form_and_the_stored_form(make: Callable[[], None]) -> None:
    """Formatted once, the message's form is still exactly Dramatiq's `format_exception(limit=30)` and
    the stored form exactly the masked, bounded full traceback."""
    exc = _caught(make)
    texts = failure_texts(exc)
    assert texts.message == "".join(traceback.format_exception(type(exc), exc, exc.__traceback__,
                                                               limit=DRAMATIQ_FRAMES))
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert texts.stored == bound_text(redact_secrets(full))
    assert failure_traceback(exc) == texts.stored


def test_failure_texts_honour_sys_tracebacklimit(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = _caught(lambda: _recurse(10))
    monkeypatch.setattr(sys, "tracebacklimit", 3, raising=False)
    texts = failure_texts(exc)
    assert texts.message == "".join(traceback.format_exception(type(exc), exc, exc.__traceback__,
                                                               limit=DRAMATIQ_FRAMES))
    assert texts.stored == "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert texts.message != texts.stored
