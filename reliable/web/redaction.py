"""What a caller who may not act on a job sees of it: secrets masked in its arguments, checkpoint and
error texts, and no search over arguments unless it may see every job's.

One rule for the keys: `reliable.redact.is_secret_name` (password, token, api_key, card_number...,
whole or as the last part of the key) plus the deployment's own glob patterns (`WebConfig.redact`,
`reliable web --redact GLOB`), matched case-insensitively. Free text (an error message, a traceback)
goes through `reliable.redact.redact_secrets` with the same names.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Sequence
from typing import Any

from starlette.exceptions import HTTPException

from ..access import Principal
from ..redact import MASK, is_secret_name, redact_secrets
from ..store import Job
from ..store.selection import JobFilter

__all__ = ["check_search", "masked_job", "redact_text", "redact_value"]


def _matches(key: str, patterns: Sequence[str]) -> bool:
    lowered = key.lower()
    return is_secret_name(key) or any(fnmatch.fnmatchcase(lowered, p.lower()) for p in patterns)


def redact_value(value: Any, patterns: Sequence[str] = ()) -> Any:
    """A copy of `value` (JSON-like) with the value of every mapping key naming a secret masked.

    Positional arguments have no names, so they are kept; keyword arguments and nested objects
    are masked by key.
    """
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _matches(k, patterns) else redact_value(v, patterns)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, patterns) for v in value]
    return value


def redact_text(text: str | None, patterns: Sequence[str] = ()) -> str | None:
    """Free text with secrets' values masked (the patterns' words count as secrets' names too)."""
    if text is None:
        return None
    extra = tuple(word for p in patterns if (word := p.strip("*?[]")) and not any(c in word for c in "*?[]"))
    return redact_secrets(text, extra_names=extra)


def masked_job(job: Job, principal: Principal, patterns: Sequence[str] = ()) -> Job:
    """The job as `principal` may see it: its arguments, checkpoint and last error's secrets masked
    unless the caller may act on it (`Principal.sees_secrets_of`)."""
    if principal.sees_secrets_of(job.home_queue, job.owner):
        return job
    return dataclasses.replace(job, message=redact_value(job.message, patterns),
                               checkpoint=redact_value(job.checkpoint, patterns),
                               last_error_message=redact_text(job.last_error_message, patterns))


def check_search(principal: Principal, flt: JobFilter) -> None:
    """Refuse a search over arguments (403) to a caller who may not see every job's arguments: whether
    a job matches would tell it what the masked values are."""
    if flt.search and not principal.unrestricted:
        raise HTTPException(403, f"{principal.name!r} may not search arguments: their secrets are masked for "
                                 "its role (narrow by queue, actor, state or time instead)")
