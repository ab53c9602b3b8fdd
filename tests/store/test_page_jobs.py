"""Keyset pagination of job listings (the API's and console's job list) and the listing filters."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from reliable.errors import ConfigError
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.schema import jobs
from reliable.store.selection import JobFilter, Reader, page_jobs


def _register(store: StateStore, count: int) -> list[str]:
    ids = []
    for n in range(count):
        job_id = f"page-{n:03d}"
        store.register(NewJob(job_id, "billing" if n % 2 else "exports", "charge" if n % 3 else "export",
                              {"args": [n], "kwargs": {"customer": f"Cust_{n}%"}, "options": {}},
                              owner="team-a" if n % 4 == 0 else None, workflow_id="wf-1" if n < 5 else None))
        ids.append(job_id)
    # Distinct, known change times (several jobs share one too: the job id breaks the tie).
    with store.write() as conn:
        for n, job_id in enumerate(ids):
            conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(updated_at=1_000.0 + n // 2))
    return ids


def _all_pages(store: StateStore, flt: JobFilter, limit: int) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(100):
        page = page_jobs(store, flt, reader=Reader.trusted(), limit=limit, cursor=cursor)
        assert len(page.jobs) <= limit
        seen.extend(j.job_id for j in page.jobs)
        cursor = page.next_cursor
        if cursor is None:
            return seen
    raise AssertionError("pagination did not end")


@pytest.mark.parametrize("limit", [1, 7, 30, 100])
def test_pages_cover_every_job_once_newest_first(store: StateStore, limit: int) -> None:
    ids = _register(store, 30)
    store.transition("page-004", Event.CANCEL, reason="r", operator="t")  # another state, a later change
    seen = _all_pages(store, JobFilter(), limit)
    assert seen[0] == "page-004"
    rest = sorted(set(ids) - {"page-004"}, key=lambda j: (1_000 + int(j[-3:]) // 2, j), reverse=True)
    assert seen[1:] == rest


def test_filters_narrow_the_listing(store: StateStore) -> None:
    _register(store, 30)
    assert set(_all_pages(store, JobFilter(queue="billing"), 4)) == {f"page-{n:03d}" for n in range(1, 30, 2)}
    assert set(_all_pages(store, JobFilter(owner="team-a"), 4)) == {f"page-{n:03d}" for n in range(0, 30, 4)}
    assert set(_all_pages(store, JobFilter(workflow_id="wf-1"), 2)) == {f"page-{n:03d}" for n in range(5)}
    assert set(_all_pages(store, JobFilter(changed_since=1_010, changed_until=1_012), 3)) == {
        "page-020", "page-021", "page-022", "page-023"}
    assert set(_all_pages(store, JobFilter(statuses=(JobStatus.PENDING,), actor="export"), 50)) == {
        f"page-{n:03d}" for n in range(0, 30, 3)}


def test_search_is_a_case_insensitive_substring_with_wildcards_taken_literally(store: StateStore) -> None:
    _register(store, 30)
    assert _all_pages(store, JobFilter(search="cust_12%"), 10) == ["page-012"]
    assert _all_pages(store, JobFilter(search="CUST_1"), 50)[-1] == "page-001"
    assert _all_pages(store, JobFilter(search="cust%1"), 50) == []  # % is not a wildcard
    assert _all_pages(store, JobFilter(search="cust_1_"), 50) == []  # nor is _


def test_a_cursor_not_from_the_api_is_refused(store: StateStore) -> None:
    with pytest.raises(ConfigError, match="cursor 'garbage!' is not one this API returned"):
        page_jobs(store, JobFilter(), reader=Reader.trusted(), cursor="garbage!")
    with pytest.raises(ConfigError, match="limit must be at least 1"):
        page_jobs(store, JobFilter(), reader=Reader.trusted(), limit=0)
