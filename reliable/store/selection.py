"""Selecting jobs for operators: filters shared by the control API, `reliable jobs`, `dlq` and `review`."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Boolean, Select, and_, exists, func, literal, select, tuple_, union_all
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from ..errors import ConfigError, JobNotFound, NotAuthorized, ReliableError
from ..inputs import MAX_NAME, MAX_TEXT, check_length
from ..isotime import FORMS as ISO_FORMS
from ..isotime import parse_time_text
from ..states import JobStatus
from .reads import Reads
from .records import Job
from .schema import job_events, jobs

__all__ = [
    "CANDIDATES_SHOWN", "DISCARDED", "FILTER_PARAMS", "MIN_PREFIX", "AmbiguousJobId", "JobFilter", "Page", "Reader",
    "count_jobs", "filter_from_params", "jobs_with_ids", "not_discarded", "page_jobs", "parse_time", "resolve_job_id",
    "select_jobs", "statuses",
]

#: The event that takes a DEAD job out of the dead-letter listing (until it next changes state).
DISCARDED = "discarded"

#: The fewest characters of a job id that name it (a whole id of any length always does).
MIN_PREFIX = 6
#: How many of the jobs an ambiguous prefix matches its error lists.
CANDIDATES_SHOWN = 10
#: Cut ids end like this (rich tables, the demo's lines): copied with the id, they are ignored.
_ELLIPSES = ("...", "…")


class AmbiguousJobId(ReliableError):
    """A job id prefix that starts several jobs' ids; `candidates` are the first CANDIDATES_SHOWN of them."""

    def __init__(self, prefix: str, candidates: Sequence[str], *, more: bool) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        self.more = more
        shown = ", ".join(self.candidates) + (", ..." if more else "")
        super().__init__(f"job id prefix {prefix!r} matches several jobs: {shown}; give more characters")


def resolve_job_id(store: Reads, given: str) -> str:
    """The job id `given` names: a whole id, or a prefix of at least MIN_PREFIX characters of one id.

    A trailing "..." or "…" (copied from a cut table) is ignored. No such job: JobNotFound; a
    prefix of several ids: AmbiguousJobId listing some of them. The CLI and the HTTP API share it.
    """
    if store.find(given) is not None:
        return given  # a whole id wins, even one that ends in "..."
    prefix = given
    for ellipsis in _ELLIPSES:
        prefix = prefix.removesuffix(ellipsis)
    if len(prefix) < MIN_PREFIX or not (prefix.isascii() and prefix.isprintable()):
        raise JobNotFound(given, hint=f"an id prefix needs at least {MIN_PREFIX} characters")
    found = store.job_ids_with_prefix(prefix, limit=CANDIDATES_SHOWN + 1)
    if found and found[0] == prefix:
        return prefix  # a whole id is the smallest of the ids it starts
    if not found:
        raise JobNotFound(given, hint="nor any id starting with it")
    if len(found) > 1:
        raise AmbiguousJobId(prefix, found[:CANDIDATES_SHOWN], more=len(found) > CANDIDATES_SHOWN)
    return found[0]


@dataclass(frozen=True)
class Reader:
    """Who a selection of jobs is for: the one rule of who may match a filter against jobs' arguments,
    and which jobs a selection to act on may hold. Every query of a `JobFilter` takes one
    (`JobFilter.conditions`), so no front end (API, console, CLI, bulk previews) can leave it out.

    `may_search`: whether `JobFilter.search` may be matched for it. Whether a job matches tells
    whether its arguments contain the guess, so only a reader who sees every job's arguments as
    stored may (an admin; a `reliable` command run with the store's own URL, which could read
    every row itself). `scope(home_queue, owner)`: whether a job is one it may act on (None: every
    job). A selection to act on (a bulk preview's count and sample: `jobs_to_act_on`) holds only
    those; a listing shows every job, each one's values disclosed for its reader
    (`reliable.disclosure`).
    """

    name: str
    may_search: bool
    scope: Callable[[str, str | None], bool] | None = None

    @classmethod
    def trusted(cls, name: str = "store credentials") -> Reader:
        """A reader who may see every row already: the store's own credentials, the library itself."""
        return cls(name, True)

    def covers(self, home_queue: str, owner: str | None) -> bool:
        """Whether a job of `home_queue` owned by `owner` is in its scope."""
        return self.scope is None or self.scope(home_queue, owner)

    def check(self, flt: JobFilter) -> None:
        """NotAuthorized (HTTP 403) when `flt` matches against arguments and this reader may not."""
        if flt.search and not self.may_search:
            raise NotAuthorized(f"{self.name!r} may not search arguments: their secrets are masked for its "
                                "role, and a match would tell what they hold (narrow by queue, actor, state or "
                                "time instead)")


@dataclass(frozen=True)
class JobFilter:
    """Which jobs an operator means. Every given field must match; empty means 'any'.

    `older_than` is in seconds since the job last changed state (by the database's clock).
    `changed_since` / `changed_until` bound the time of its last change (epoch seconds).
    `search` is a case-insensitive substring of the job's message (its arguments and options).
    `exclude_discarded` hides DEAD jobs discarded since their last transition (the dead-letter view).
    The fields that name things (ids, states, queues, actors, error classes, owners, workflows) take
    several values: a job matches any of them (a single string is taken as one value).
    """

    job_ids: tuple[str, ...] = ()
    statuses: tuple[JobStatus, ...] = ()
    queue: tuple[str, ...] = ()
    actor: tuple[str, ...] = ()
    error_class: tuple[str, ...] = ()
    older_than: float | None = None
    exclude_discarded: bool = False
    owner: tuple[str, ...] = ()
    workflow_id: tuple[str, ...] = ()
    changed_since: float | None = None
    changed_until: float | None = None
    search: str | None = None

    def __post_init__(self) -> None:
        for name in _MANY:
            value: Any = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,) if value else ())
            else:
                object.__setattr__(self, name, tuple(value or ()))

    @property
    def is_empty(self) -> bool:
        """True when nothing narrows the selection (every job would match)."""
        return not (self.job_ids or self.statuses or self.queue or self.actor or self.error_class
                    or self.older_than is not None or self.owner or self.workflow_id
                    or self.changed_since is not None or self.changed_until is not None or self.search)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: only the fields given."""
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if value in (None, (), False):
                continue
            out[name] = [getattr(v, "value", v) for v in value] if isinstance(value, tuple) else value
        return out

    def conditions(self, now: float | None, reader: Reader) -> list[ColumnElement[bool]]:
        """The WHERE clauses of this filter (`now` is the database time, needed for older_than), for
        `reader`: NotAuthorized when it may not match the filter's search (`Reader.check`)."""
        reader.check(self)
        where: list[ColumnElement[bool]] = []
        if self.job_ids:
            where.append(jobs.c.job_id.in_(list(self.job_ids)))
        if self.statuses:
            where.append(jobs.c.status.in_([JobStatus(s).value for s in self.statuses]))
        if self.queue:
            where.append(jobs.c.queue.in_(list(self.queue)))
        if self.actor:
            where.append(jobs.c.actor.in_(list(self.actor)))
        if self.error_class:
            where.append(jobs.c.last_error_class.in_(list(self.error_class)))
        if self.older_than is not None and now is not None:
            where.append(jobs.c.updated_at < now - self.older_than)
        if self.owner:
            where.append(jobs.c.owner.in_(list(self.owner)))
        if self.workflow_id:
            where.append(jobs.c.workflow_id.in_(list(self.workflow_id)))
        if self.changed_since is not None:
            where.append(jobs.c.updated_at >= self.changed_since)
        if self.changed_until is not None:
            where.append(jobs.c.updated_at < self.changed_until)
        if self.search:
            where.append(_TextContains(jobs.c.message, self.search.lower()))
        if self.exclude_discarded:
            where.append(not_discarded())
        return where


class _TextContains(FunctionElement[bool]):
    """`lower(haystack)` contains `needle` (already lower case): strpos() on PostgreSQL, instr() elsewhere.

    Not LIKE '%...%' on purpose: PostgreSQL estimates such a pattern to match almost no row, so it
    plans "read every row of the state, then sort" and a common word costs a full scan. strpos()
    gets the default estimate (a third of the rows): the planner walks (status, updated_at) newest
    first and stops once the page is full. A rare word scans the state's rows either way.
    """

    type = Boolean()
    inherit_cache = True
    name = "text_contains"

    def __init__(self, haystack: ColumnElement[Any], needle: str) -> None:
        super().__init__(haystack, literal(needle))


@compiles(_TextContains)
def _instr(element: _TextContains, compiler: Any, **kw: Any) -> str:
    haystack, needle = element.clauses
    return f"instr(lower({compiler.process(haystack, **kw)}), {compiler.process(needle, **kw)}) > 0"


@compiles(_TextContains, "postgresql")
def _strpos(element: _TextContains, compiler: Any, **kw: Any) -> str:
    haystack, needle = element.clauses
    return f"strpos(lower({compiler.process(haystack, **kw)}), {compiler.process(needle, **kw)}) > 0"


def not_discarded() -> ColumnElement[bool]:
    """The job (reliable_jobs) was not discarded since its last transition: still a dead letter."""
    # An alias: the caller may itself read job_events (the alert queries do).
    discards = job_events.alias("discards")
    return ~exists().where(and_(discards.c.job_id == jobs.c.job_id, discards.c.event == DISCARDED,
                                discards.c.version == jobs.c.version)).correlate(jobs)


def _now(store: Reads, flt: JobFilter) -> float | None:
    return store.now() if flt.older_than is not None else None


def select_jobs(store: Reads, flt: JobFilter, *, reader: Reader, limit: int | None = 100,
                newest_first: bool = False, offset: int = 0) -> list[Job]:
    """Jobs matching `flt` for `reader`: oldest change first (the order bulk commands work in), at most
    `limit`; `newest_first`: the listings' order (page_jobs'), ties broken by job id the same way."""
    order = ((jobs.c.updated_at.desc(), jobs.c.job_id.desc()) if newest_first
             else (jobs.c.updated_at.asc(), jobs.c.job_id.asc()))
    stmt: Select[tuple[object, ...]] = (select(jobs).where(*flt.conditions(_now(store, flt), reader))
                                        .order_by(*order).offset(offset))
    if limit is not None:
        stmt = stmt.limit(limit)
    with store.read() as conn:
        return [Job.from_row(row) for row in conn.execute(stmt).mappings()]


def jobs_with_ids(store: Reads, job_ids: Sequence[str], *, reader: Reader) -> list[Job]:
    """The jobs of `job_ids` that exist (an operation's sample), oldest change first; none for no id
    (a JobFilter without ids would match every job)."""
    if not job_ids:
        return []
    return select_jobs(store, JobFilter(job_ids=tuple(job_ids)), reader=reader, limit=None)


@dataclass(frozen=True)
class Page:
    """One page of a job listing, newest change first, and the cursor of the next (None: the last page)."""

    jobs: list[Job]
    next_cursor: str | None


def _cursor(job: Job) -> str:
    raw = json.dumps([job.updated_at, job.job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _after(cursor: str) -> tuple[float, str]:
    try:
        updated_at, job_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return float(updated_at), str(job_id)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"cursor {cursor!r} is not one this API returned") from exc


def page_jobs(store: Reads, flt: JobFilter, *, reader: Reader, limit: int = 50,
              cursor: str | None = None) -> Page:
    """Jobs matching `flt` for `reader`, newest change first, `limit` per page, after `cursor` (keyset pagination).

    One index range per state, merged: (status, updated_at) serves each, so the first page of a
    table of millions reads about `limit` rows per state instead of sorting the table. Across
    states, the branches select only the keys (job_id, updated_at) and the page's rows are read
    by primary key after the merge: building the union of whole rows cost ~20 ms of Python
    (SQLAlchemy's column proxies for 11 subqueries of 36 columns) per call.
    """
    if limit < 1:
        raise ConfigError(f"limit must be at least 1, got {limit}")
    where = flt.conditions(_now(store, flt), reader)
    if cursor:
        updated_at, job_id = _after(cursor)
        where.append(tuple_(jobs.c.updated_at, jobs.c.job_id) < tuple_(literal(updated_at), literal(job_id)))
    order = (jobs.c.updated_at.desc(), jobs.c.job_id.desc())
    states = flt.statuses or tuple(JobStatus)
    stmt: Any
    if len(states) == 1:
        stmt = select(jobs).where(jobs.c.status == states[0].value, *where).order_by(*order).limit(limit + 1)
    else:
        keys = [select(jobs.c.job_id, jobs.c.updated_at).where(jobs.c.status == state.value, *where)
                .order_by(*order).limit(limit + 1).subquery().select() for state in states]
        merged = union_all(*keys).subquery()
        top = (select(merged).order_by(merged.c.updated_at.desc(), merged.c.job_id.desc())
               .limit(limit + 1).subquery())
        stmt = (select(jobs).join(top, jobs.c.job_id == top.c.job_id)
                .order_by(top.c.updated_at.desc(), top.c.job_id.desc()))
    with store.read() as conn:
        found = [Job.from_row(row) for row in conn.execute(stmt).mappings()]
    return Page(found[:limit], _cursor(found[limit - 1]) if len(found) > limit else None)


def count_jobs(store: Reads, flt: JobFilter, *, reader: Reader) -> int:
    """How many jobs match `flt` for `reader`."""
    stmt = select(func.count()).select_from(jobs).where(*flt.conditions(_now(store, flt), reader))
    with store.read() as conn:
        return int(conn.execute(stmt).scalar_one())


def statuses(values: Sequence[str]) -> tuple[JobStatus, ...]:
    """Parse state names (any case) into JobStatus values; ConfigError names the bad one."""
    out = []
    for value in values:
        try:
            out.append(JobStatus(value.upper()))
        except ValueError:
            raise ConfigError(f"unknown status {value!r} (known: {', '.join(s.value for s in JobStatus)})") from None
    return tuple(out)


#: The parameters of a job filter in the HTTP API (the jobs list's query, a bulk operation's `filter`),
#: and the JobFilter field each sets.
FILTER_PARAMS: Mapping[str, str] = {
    "state": "statuses", "queue": "queue", "actor": "actor", "owner": "owner", "error_class": "error_class",
    "workflow": "workflow_id", "changed_since": "changed_since", "changed_until": "changed_until", "q": "search",
    "ids": "job_ids",
}
_LISTS = ("state", "ids", "queue", "actor", "owner", "error_class", "workflow")
#: JobFilter's fields that take several values.
_MANY = ("job_ids", "statuses", "queue", "actor", "error_class", "owner", "workflow_id")


def parse_time(value: object, name: str = "time") -> float:
    """Epoch seconds from a number (or a string of one) or an ISO 8601 time (UTC unless it has an offset)."""
    if isinstance(value, bool):
        raise ConfigError(f"{name!r}: expected epoch seconds or an ISO 8601 time, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                seconds = parse_time_text(text).timestamp()
            except ValueError:
                raise ConfigError(f"{name!r}: {value!r} is neither epoch seconds nor {ISO_FORMS}") from None
    else:
        raise ConfigError(f"{name!r}: expected epoch seconds or an ISO 8601 time, got {value!r}")
    if not math.isfinite(seconds):
        raise ConfigError(f"{name!r}: {value!r} is not a finite time")
    return seconds


def _values(name: str, value: object) -> list[str]:
    """The strings of a parameter given once, repeated (a list) or comma-separated."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{name!r}: expected strings, got {item!r}")
        out.extend(part.strip() for part in item.split(",") if part.strip())
    return out


def _single(name: str, value: object) -> object:
    if isinstance(value, list | tuple):
        distinct = list(dict.fromkeys(value))
        if len(distinct) != 1:
            raise ConfigError(f"{name!r} is given {len(distinct)} different values; give it once")
        return distinct[0]
    return value


def filter_from_params(params: Mapping[str, object], *, ignore: Collection[str] = ()) -> JobFilter:
    """The JobFilter of the API's filter parameters (FILTER_PARAMS): the one rule the jobs list and the
    bulk operations share.

    A value is a string, or a list of them (a repeated query parameter, a JSON array); `state` and
    `ids` also take comma-separated lists; times are epoch seconds or ISO 8601; empty values mean
    'any'. Keys in `ignore` belong to the caller (e.g. cursor, limit); any other unknown key is a
    ConfigError, so that a misspelt filter never widens a selection silently. A filter is kept with
    the operation it selects (a refused one too), so its text is bounded as a person's: `q` at most
    `inputs.MAX_TEXT` characters, each name of a list at most `inputs.MAX_NAME` (TextTooLong).
    """
    unknown = sorted(set(params) - set(FILTER_PARAMS) - set(ignore))
    if unknown:
        raise ConfigError(f"unknown filter parameter {unknown[0]!r} (known: {', '.join(FILTER_PARAMS)})")
    fields: dict[str, Any] = {}
    for name, field_name in FILTER_PARAMS.items():
        value = params.get(name)
        if value is None or value in ("", [], ()):
            continue
        if name in _LISTS:
            items = _values(name, value)
            for item in items:
                check_length(name, item, limit=MAX_NAME, where="filter")
            try:
                fields[field_name] = statuses(items) if name == "state" else tuple(dict.fromkeys(items))
            except ConfigError as exc:
                raise ConfigError(f"{name!r}: {exc}") from None
        elif name in ("changed_since", "changed_until"):
            fields[field_name] = parse_time(_single(name, value), name)
        else:
            single = _single(name, value)
            if not isinstance(single, str):
                raise ConfigError(f"{name!r}: expected a string, got {single!r}")
            check_length(name, single, limit=MAX_TEXT, where="filter")
            if single.strip():
                fields[field_name] = single.strip() if name != "q" else single
    return JobFilter(**fields)
