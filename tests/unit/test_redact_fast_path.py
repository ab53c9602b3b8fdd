"""reliable.redact's fast path (a pattern runs only on text holding its literal part) masks exactly
what applying every pattern to every text masks."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from reliable import redact
from reliable.redact import MASK, SECRET_NAMES, redact_secrets


def every_pattern(text: str, extra_names: tuple[str, ...] = ()) -> str:
    """The reference: each pattern applied to the whole text, in order, whatever the text holds."""
    text = redact._USERINFO.sub(rf"\g<head>:{MASK}@", text)
    text = redact._KEY_VALUE.sub(rf"\g<key>={MASK}", text)
    return redact._named_secret(extra_names).sub(redact._mask_value, text)


# Characters that (?i) matches to an ASCII letter although they are not ASCII.
_LOOKALIKES = {"i": ("I", "\u0130", "\u0131"), "s": ("S", "\u017f"), "k": ("K", "\u212a")}


@st.composite
def secret_name(draw: st.DrawFn) -> str:
    """A secret's name as text may spell it: any case, look-alike letters, `_` as `-` or nothing."""
    name = draw(st.sampled_from((*SECRET_NAMES, "db_password", "X-Api-Key", "token_count", "ssn_hash")))
    out = []
    for char in name:
        if char == "_":
            out.append(draw(st.sampled_from(("_", "-", ""))))
        else:
            out.append(draw(st.sampled_from((char, char.upper(), *_LOOKALIKES.get(char, ())))))
    return "".join(out)


FRAGMENTS = st.sampled_from((
    "=", ":", ": ", " = ", "'", '"', "\n", " ", "\t", "@", "://", "postgresql+psycopg://app:", "amqp://u:p@h/",
    "Bearer ", "Basic ", "password=", "PWD=", "passwd", "sk-live-1", "hunter2", ",", ";", "&", ")", "}", "]",
    "Traceback (most recent call last):\n", '  File "/app/jobs.py", line 12, in run\n', "ValueError: boom",
    "\u0130", "\u0131", "\u017f", "\u212a", "\u00e9", "\u00df",
))
TEXT = st.lists(st.one_of(FRAGMENTS, secret_name(), st.text(max_size=6)), max_size=24).map("".join)
EXTRA = st.lists(st.one_of(st.sampled_from(("ssn_hash", "customer_ref", "x_", "\u0130d", "K_id", "pin")),
                           st.text(min_size=1, max_size=6)), max_size=3).map(tuple)


@settings(max_examples=300, deadline=None)
@given(text=TEXT, extra=EXTRA)
def test_fast_path_masks_what_every_pattern_masks(text: str, extra: tuple[str, ...]) -> None:
    assert redact_secrets(text, extra_names=extra) == every_pattern(text, extra)


@settings(max_examples=100, deadline=None)
@given(text=TEXT)
def test_redact_url_masks_what_both_url_patterns_mask(text: str) -> None:
    expected = redact._KEY_VALUE.sub(rf"\g<key>={MASK}", redact._USERINFO.sub(rf"\g<head>:{MASK}@", text))
    assert redact._mask_url_passwords(text) == expected


def test_the_fold_covers_every_character_ignorecase_matches_to_an_ascii_letter() -> None:
    """The premise of the literal check, over all of Unicode: a character (?i) matches to an ASCII
    letter folds to that letter, and no other character folds into ASCII."""
    letter = re.compile("(?i)[a-z]")
    for code in range(0x80, 0x110000):
        char = chr(code)
        folded = redact._folded(char)
        if letter.fullmatch(char):
            assert len(folded) == 1 and folded.isascii() and re.fullmatch(f"(?i){folded}", char), hex(code)
        else:
            assert not any(c.isascii() for c in folded), hex(code)


def test_a_typical_traceback_skips_the_named_pattern() -> None:
    """The point of the fast path: a traceback quoting no secret's name runs no pattern at all."""
    text = ('Traceback (most recent call last):\n  File "/app/jobs.py", line 12, in export\n'
            '    write_page(account_id, page)\nValueError: page 3 of account 42 is missing\n')
    assert redact._name_literals(()) is not None
    assert not any(literal in redact._folded(text) for literal in redact._name_literals(()) or ())
    assert redact_secrets(text) == text
