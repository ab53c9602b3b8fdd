"""Passwords never reach an error message, a log line or a printed command: `redact_url`.

The one helper every place that shows a store or broker URL goes through. A URL SQLAlchemy can
parse is rendered by SQLAlchemy with its password hidden; then, for what SQLAlchemy's parser
does not see as the password (a raw '@' inside it, a `password=` query or DSN key, text that is
not a URL at all), two patterns mask whatever sits in a password's place. Input that failed to
parse should not be echoed in the first place: the patterns only catch what looks like a
credential.
"""

from __future__ import annotations

import contextlib
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

__all__ = ["MASK", "redact_url"]

MASK = "***"

# scheme://user:<password>@ — greedy up to the last '@' of the token, so an unquoted '@' in the
# password cannot leave its tail visible.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][\w+.-]*://[^:@/\s'\"]*):[^\s'\"]*@")
# password=..., passwd=..., pwd=... in a query string or a libpq key=value DSN.
_KEY_VALUE = re.compile(r"(?i)(?P<key>\b(?:password|passwd|pwd))=(?P<value>'[^']*'|[^&;\s'\"]*)")


def redact_url(url: str | URL) -> str:
    """`url` (a string or a SQLAlchemy URL) as text that is safe to print: passwords masked."""
    from sqlalchemy.engine import URL, make_url

    if isinstance(url, URL):
        text = url.render_as_string(hide_password=True)
    else:
        text = str(url)
        with contextlib.suppress(Exception):  # not a URL SQLAlchemy parses: the patterns below still apply
            text = make_url(text).render_as_string(hide_password=True)
    text = _USERINFO.sub(rf"\g<head>:{MASK}@", text)
    return _KEY_VALUE.sub(rf"\g<key>={MASK}", text)
