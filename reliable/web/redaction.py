"""Who reads a job through the API or the console, for `reliable.disclosure.disclose`, and no search
over arguments unless the caller sees every job's.

The reader's rights: `Principal.sees_secrets_of` the job (an admin; an operator inside its scope)
sees its values as stored; a viewer, or an operator outside its scope, sees them masked by the rules
of `reliable.disclosure`, with the deployment's own glob patterns (`WebConfig.redact`,
`reliable web --redact GLOB`) added to the secrets' names.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.exceptions import HTTPException

from ..access import Principal
from ..disclosure import JOB_FIELDS, Audience, disclosed
from ..store import Job
from ..store.selection import JobFilter

__all__ = ["audience_for", "check_search", "masked_job"]


def audience_for(principal: Principal, job: Job, patterns: Sequence[str] = ()) -> Audience:
    """The audience `principal` is for `job`: it sees secrets when it may act on the job."""
    return Audience(principal.role, principal.sees_secrets_of(job.home_queue, job.owner), tuple(patterns))


def masked_job(job: Job, principal: Principal, patterns: Sequence[str] = ()) -> Job:
    """The job as `principal` may see it (`reliable.disclosure.JOB_FIELDS`), still a `Job` for the templates."""
    return disclosed(job, JOB_FIELDS, audience_for(principal, job, patterns))


def check_search(principal: Principal, flt: JobFilter) -> None:
    """Refuse a search over arguments (403) to a caller who may not see every job's arguments: whether
    a job matches would tell it what the masked values are."""
    if flt.search and not principal.unrestricted:
        raise HTTPException(403, f"{principal.name!r} may not search arguments: their secrets are masked for "
                                 "its role (narrow by queue, actor, state or time instead)")
