"""Passwords never reach an error message, a log line or a printed command: `redact_url`, `redact_secrets`.

The one helper every place that shows a store or broker URL goes through. A URL SQLAlchemy can
parse is rendered by SQLAlchemy with its password hidden; then, for what SQLAlchemy's parser
does not see as the password (a raw '@' inside it, a `password=` query or DSN key, text that is
not a URL at all), two patterns mask whatever sits in a password's place. Input that failed to
parse should not be echoed in the first place: the patterns only catch what looks like a
credential.

`redact_secrets` is for free text that may quote credentials (an exception's message, a traceback):
the URL patterns, plus the value of every `name=value` / `name: value` whose name is a common
secret's (token, password, api_key, secret, authorization...). Only the value is masked: the line
keeps its shape, so a traceback stays readable.

Each pattern runs only on text holding its literal part (`://` and `@`; a secret's name, folded
the way `(?i)` compares letters): most tracebacks hold none, and skipping costs microseconds where
the patterns cost hundreds (tests/unit/test_redact_fast_path.py checks the result is identical).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["MASK", "SECRET_NAMES", "is_secret_name", "redact_secrets", "redact_url"]

MASK = "***"

# scheme://user:<password>@ — greedy up to the last '@' of the token, so an unquoted '@' in the
# password cannot leave its tail visible. The scheme's length is bounded so that scanning a long
# run of word characters (a traceback of megabytes) stays linear.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][\w+.-]{0,40}://[^:@/\s'\"]*):[^\s'\"]*@")
# password=..., passwd=..., pwd=... in a query string or a libpq key=value DSN.
_KEY_VALUE = re.compile(r"(?i)(?P<key>\b(?:password|passwd|pwd))=(?P<value>'[^']*'|[^&;\s'\"]*)")


#: The names of secrets, in free text (`redact_secrets`: `name=value`, `name: value`) and as the keys
#: of arguments the console masks for read-only callers (`reliable.web.config.DEFAULT_REDACT`). An
#: underscore also matches a hyphen or nothing (api_key: api-key, apikey).
SECRET_NAMES: tuple[str, ...] = (
    "password", "passwd", "pwd", "passphrase", "secret", "token", "api_key", "access_key", "private_key",
    "client_secret", "credential", "credentials", "authorization", "cookie", "session_id", "card_number", "cvv",
    "ssn", "iban",
)


def _name_pattern(names: Sequence[str]) -> str:
    # A secret's name: the whole word, or its last part (access_token, X-Api-Key, db_password), never a
    # word that merely contains one (TokenError, PasswordExpired, token_count are left alone).
    words = "|".join(re.escape(n).replace("_", "[_-]?") for n in sorted(set(names), key=len, reverse=True))
    return rf"(?:[\w-]*[_-])?(?:{words})"


_SECRET_KEY = re.compile(rf"(?i){_name_pattern(SECRET_NAMES)}")


def is_secret_name(name: str) -> bool:
    """Whether a key (an argument's, a JSON object's) names a secret: one of SECRET_NAMES, whole or as
    its last part (db_password, X-Api-Key), never a word that merely contains one (token_count)."""
    return _SECRET_KEY.fullmatch(name) is not None


@functools.lru_cache(maxsize=32)
def _named_secret(extra: tuple[str, ...]) -> re.Pattern[str]:
    # name, an optional closing quote (a dict or JSON key), '=' or ':', then the value: quoted, an HTTP
    # auth scheme and its credentials, or a run of characters up to a separator.
    return re.compile(
        rf"(?i)(?P<key>(?<![\w-]){_name_pattern((*SECRET_NAMES, *extra))})(?P<sep>['\"]?[ \t]*[:=][ \t]*)"
        r"(?!=)(?P<value>'[^'\n]*'|\"[^\"\n]*\"|(?:Bearer|Basic|Token|Digest)\s+[^\s,;&'\"]+|[^\s,;&'\")}\]]+)")


def _mask_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if value[:1] in ("'", '"'):
        masked = value[0] + MASK + value[0]
    elif " " in value:  # an auth scheme: keep its name
        masked = value.split(None, 1)[0] + " " + MASK
    else:
        masked = MASK
    return match.group("key") + match.group("sep") + masked


# Under (?i) these non-ASCII characters match an ASCII letter (U+0130, U+0131: i; U+017F: s; U+212A: k);
# mapped before lowering, an ASCII literal the patterns match is a substring of the folded text.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_KEY_VALUE_LITERALS = ("passw", "pwd")


def _folded(text: str) -> str:
    return text.lower() if text.isascii() else text.translate(_FOLD).lower()


@functools.lru_cache(maxsize=32)
def _name_literals(extra: tuple[str, ...]) -> tuple[str, ...] | None:
    # One literal each name's key must contain (its longest part between underscores, which the
    # pattern turns into optional separators); None when some name has none usable (run always).
    literals = []
    for name in sorted(set((*SECRET_NAMES, *extra))):
        part = max(name.lower().split("_"), key=len)
        if not part or not name.isascii():
            return None
        literals.append(part)
    return tuple(literals)


def _mask_url_passwords(text: str) -> str:
    if "://" in text and "@" in text:
        text = _USERINFO.sub(rf"\g<head>:{MASK}@", text)
    if "=" in text:
        folded = _folded(text)
        if any(literal in folded for literal in _KEY_VALUE_LITERALS):
            text = _KEY_VALUE.sub(rf"\g<key>={MASK}", text)
    return text


def redact_secrets(text: str, *, extra_names: Sequence[str] = ()) -> str:
    """Free text with credentials masked: URL passwords, `password=` keys, and the value of any
    `name=value` or `name: value` named like a secret (SECRET_NAMES, plus `extra_names`). Only values
    are masked, never a whole line."""
    text = _mask_url_passwords(text)
    extra = tuple(extra_names)
    literals = _name_literals(extra)
    if literals is not None:
        if "=" not in text and ":" not in text:
            return text
        folded = _folded(text)
        if not any(literal in folded for literal in literals):
            return text
    return _named_secret(extra).sub(_mask_value, text)


def redact_url(url: str | URL) -> str:
    """`url` (a string or a SQLAlchemy URL) as text that is safe to print: passwords masked."""
    from sqlalchemy.engine import URL, make_url

    if isinstance(url, URL):
        text = url.render_as_string(hide_password=True)
    else:
        text = str(url)
        with contextlib.suppress(Exception):  # not a URL SQLAlchemy parses: the patterns below still apply
            text = make_url(text).render_as_string(hide_password=True)
    return _mask_url_passwords(text)
