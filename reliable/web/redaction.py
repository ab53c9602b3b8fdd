"""Who reads a job through the API or the console, for `reliable.disclosure.disclose` (who may search
arguments is `Principal.reader`'s, checked by every query: `reliable.store.selection.Reader`).

The reader's rights: `Principal.sees_secrets_of` the job (an admin; an operator inside its scope)
sees its values as stored; a viewer, or an operator outside its scope, sees them masked by the rules
of `reliable.disclosure`, with the deployment's own glob patterns (`WebConfig.redact`,
`reliable web --redact GLOB`) added to the secrets' names.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..access import Principal
from ..disclosure import JOB_FIELDS, Audience, disclosed
from ..store import Job

__all__ = ["audience_for", "masked_job"]


def audience_for(principal: Principal, job: Job, patterns: Sequence[str] = ()) -> Audience:
    """The audience `principal` is for `job`: it sees secrets when it may act on the job."""
    return Audience(principal.role, principal.sees_secrets_of(job.home_queue, job.owner), tuple(patterns))


def masked_job(job: Job, principal: Principal, patterns: Sequence[str] = ()) -> Job:
    """The job as `principal` may see it (`reliable.disclosure.JOB_FIELDS`), still a `Job` for the templates."""
    return disclosed(job, JOB_FIELDS, audience_for(principal, job, patterns))
