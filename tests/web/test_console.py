"""The console's pages over a real store (both databases), through a signed-in browser session."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.options import STORED_CONTRACT
from reliable.redact import MASK
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.job_stats import StatsBuffer, write_stats
from reliable.store.schema import job_events
from reliable.web import WebConfig, create_app

from web_support import Tokens, session

TRACEBACK = 'Traceback (most recent call last):\n  File "app.py", line 3, in charge\nConnectionError: boom\n'


def make_job(store: StateStore, job_id: str, *, queue: str = "exports", actor: str = "export",
             kwargs: dict[str, Any] | None = None, owner: str | None = None, workflow: str | None = None,
             contract: dict[str, Any] | None = None) -> None:
    """A PENDING job; `contract`: the actor options stored with it at registration (as the middleware does)."""
    options = {STORED_CONTRACT: contract} if contract else {}
    store.register(NewJob(job_id, queue, actor, {"args": [1], "kwargs": kwargs or {}, "options": options},
                          owner=owner, workflow_id=workflow))


def run_and_end(store: StateStore, job_id: str, event: Event, *, checkpoint: Any = None,
                error_type: str = "ConnectionError") -> None:
    """Claim the job as worker w1 and end the attempt with `event` (None: leave it RUNNING)."""
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    if checkpoint is not None:
        store.save_checkpoint(job_id, claim.lease_id, checkpoint, lease_ttl=60)
    store.record_effect(job_id, claim.lease_id, "charge-1", attempt_id=claim.attempt_id)
    if event is not Event.CLAIM:
        store.finish(job_id, claim.lease_id, event, worker_id="w1",
                     error=ErrorInfo("transient", error_type, "boom") if event is not Event.SUCCEED else None)


@pytest.fixture
def jobs(store: StateStore) -> dict[str, str]:
    """One job in each interesting state; name -> job id. Their claims and ends are counted in the
    latency and outcome history as a worker's flush writes them (reliable.worker.stats)."""
    counted = StatsBuffer()
    store.add_listener(counted)
    ids = {"pending": "a1b2c3d4-pending", "running": "a1b2c3d4-running", "failed": "b7e9f0aa-failed",
           "dead": "c0ffee00-dead", "review": "d00d0000-review", "billing": "e1e1e1e1-billing",
           "succeeded": "f0f0f0f0-succeeded"}
    make_job(store, ids["pending"], kwargs={"account": "acme", "password": "hunter2"}, owner="team-data",
             workflow="wf-1")
    make_job(store, ids["running"], contract={"resumable": True})
    make_job(store, ids["failed"], actor="charge", contract={"idempotent": False})
    make_job(store, ids["dead"])
    make_job(store, ids["review"], actor="charge", contract={"idempotent": False})
    make_job(store, ids["billing"], queue="billing", actor="invoice")
    make_job(store, ids["succeeded"], queue="billing", actor="invoice")
    run_and_end(store, ids["running"], Event.CLAIM, checkpoint={"page": 3})
    run_and_end(store, ids["failed"], Event.FAIL, error_type="ValueError")
    run_and_end(store, ids["dead"], Event.DEAD_LETTER)
    run_and_end(store, ids["review"], Event.NEED_REVIEW)
    run_and_end(store, ids["succeeded"], Event.SUCCEED)
    with store.write() as conn:  # the worker's masked traceback of the failed attempt
        conn.execute(job_events.update().where(job_events.c.job_id == ids["failed"], job_events.c.event == "fail")
                     .values(traceback=TRACEBACK))
    write_stats(store, counted.take())
    return ids


def enabled_actions(page: str) -> set[str]:
    """The commands a job page offers as an enabled button."""
    return set(re.findall(r'<form class="action" method="post" action="[^"]*/actions/(\w+)"', page))


def flash(page: str) -> str:
    """The page's flash messages."""
    return " ".join(re.findall(r'<p class="flash flash-\w+" role="\w+">([^<]*)</p>', page))


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_page_renders_for_each_role(store: StateStore, tokens: Tokens, jobs: dict[str, str],
                                          role: str) -> None:
    client, _ = session(store, getattr(tokens, role))
    for path in ("/", "/overview/live", "/jobs", "/dlq", "/review", "/jobs?state=FAILED&state=DEAD",
                 *(f"/jobs/{job_id}" for job_id in jobs.values()), f"/jobs/{jobs['running']}/status"):
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[-500:])
    overview = client.get("/").text
    assert 'href="http://testserver/dlq"><span class="n">1</span> dead letters' in overview
    assert 'href="http://testserver/review"><span class="n">1</span> in review' in overview
    assert '<svg viewBox' in overview and "Failure rate per minute" in overview
    # Succeeded and run time p95 bars in the one minute the jobs ran, a failure rate bar (history).
    assert overview.count('<rect class="bar" ') == 2 and overview.count('<rect class="bar bar-bad" ') == 1
    assert '<span class="n">0</span> waiting to retry' in overview and "scheduled for later" in overview
    assert 'id="latency-all"' in overview and "run p95" in overview and "Run time p95 per minute" in overview
    assert "Succeeded per minute: highest 1 per minute" in overview
    failed = client.get(f"/jobs/{jobs['failed']}").text
    assert "<details><summary>Traceback</summary>" in failed and "ConnectionError: boom" in failed
    assert "charge-1" in failed  # its effect
    assert f"<code>{jobs['dead']}</code>" in client.get("/dlq").text
    assert jobs["failed"] not in client.get("/dlq").text


def test_a_viewer_sees_redacted_arguments_and_only_disabled_actions(store: StateStore, tokens: Tokens,
                                                                     jobs: dict[str, str]) -> None:
    viewer, _ = session(store, tokens.viewer)
    page = viewer.get(f"/jobs/{jobs['pending']}").text
    assert "hunter2" not in page and MASK in page and "acme" in page
    assert enabled_actions(page) == set()
    # No form at all: the eight commands and why each is closed, behind one "why not" disclosure.
    assert page.count('<li id="why-') == 8 and page.count('<details class="why-not">') == 1
    assert "No action is open to your role on this job now." in page
    assert "not permitted: vera (viewer) may not pause jobs of queue &#39;exports&#39;" in page
    admin, _ = session(store, tokens.admin)
    page = admin.get(f"/jobs/{jobs['pending']}").text
    assert "hunter2" in page and enabled_actions(page) == {"pause", "stop", "cancel"}
    # Disabled ones say why, in Control's words, under "why not"; only the allowed ones are forms.
    assert "cannot resume a PENDING job (allowed from PAUSED, STOPPED)" in page
    assert page.count('<form class="action"') == 3 and page.count('<li id="why-') == 5


def test_actions_need_the_session_csrf_token(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, csrf = session(store, tokens.admin)
    url = f"/jobs/{jobs['pending']}/actions/pause"
    for data in ({"reason": "maintenance"}, {"reason": "maintenance", "csrf_token": "forged"}):
        refused = client.post(url, data=data, follow_redirects=False)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert store.get(jobs["pending"]).status is JobStatus.PENDING
    done = client.post(url, data={"reason": "maintenance", "csrf_token": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"http://testserver/jobs/{jobs['pending']}"
    assert store.get(jobs["pending"]).status is JobStatus.PAUSED
    page = client.get(done.headers["location"]).text
    assert "pause: moved to PAUSED." in flash(page)
    assert "pause" not in flash(client.get(done.headers["location"]).text)  # shown once
    event = store.events(jobs["pending"], events=["pause"])[-1]
    assert (event.operator, event.reason, event.detail["source"]) == ("ada", "maintenance", "api:session")
    # Resume is offered although the actor is not resumable: the job was paused before it ever ran,
    # so it has no checkpoint to resume from and nothing that could repeat (Control._plan_resume).
    assert enabled_actions(page) == {"stop", "cancel", "resume"}


def test_a_scoped_operator_sees_other_queues_disabled_and_a_forged_post_is_refused_and_audited(
        store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, csrf = session(store, tokens.operator)  # otto: queue 'billing' only
    page = client.get(f"/jobs/{jobs['pending']}").text
    assert enabled_actions(page) == set()
    assert "not permitted: otto (operator) may not cancel jobs of queue &#39;exports&#39;" in page
    forged = client.post(f"/jobs/{jobs['pending']}/actions/cancel", data={"reason": "x", "csrf_token": csrf})
    assert forged.status_code == 403
    assert "operator &#39;otto&#39; (roles operator) may not cancel jobs on queue &#39;exports&#39;" in forged.text
    assert store.get(jobs["pending"]).status is JobStatus.PENDING
    refused = store.events(jobs["pending"], events=["command_refused"])[-1]
    assert refused.operator == "otto" and refused.detail["command"] == "cancel" and refused.reason == "x"
    # Its own queue's job offers what its state allows, and the command runs.
    assert enabled_actions(client.get(f"/jobs/{jobs['billing']}").text) == {"pause", "stop", "cancel"}
    done = client.post(f"/jobs/{jobs['billing']}/actions/cancel", data={"reason": "dup", "csrf_token": csrf})
    assert done.status_code == 200 and "cancel: moved to CANCELLED." in flash(done.text)


def test_control_decides_and_its_refusal_is_shown(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, csrf = session(store, tokens.admin)
    blank = client.post(f"/jobs/{jobs['pending']}/actions/pause", data={"reason": " ", "csrf_token": csrf})
    assert "pause refused: pause needs a reason" in flash(blank.text)
    wrong_state = client.post(f"/jobs/{jobs['pending']}/actions/resume", data={"reason": "r", "csrf_token": csrf})
    assert "resume refused: cannot resume a PENDING job" in flash(wrong_state.text)
    assert store.get(jobs["pending"]).status is JobStatus.PENDING
    assert client.post(f"/jobs/{jobs['pending']}/actions/explode", data={"csrf_token": csrf}).status_code == 404


def test_retrying_a_non_idempotent_job_needs_the_explicit_confirmation(store: StateStore, tokens: Tokens,
                                                                       jobs: dict[str, str]) -> None:
    client, csrf = session(store, tokens.admin)
    page = client.get(f"/jobs/{jobs['failed']}").text
    assert enabled_actions(page) == {"restart", "requeue"}
    assert page.count('name="confirm_duplicates" value="yes" required') == 2
    url = f"/jobs/{jobs['failed']}/actions/requeue"
    unconfirmed = client.post(url, data={"reason": "fixed the card", "csrf_token": csrf})
    assert "requeue refused: actor &#39;charge&#39; is not idempotent" in flash(unconfirmed.text)
    assert store.get(jobs["failed"]).status is JobStatus.FAILED
    confirmed = client.post(url, data={"reason": "fixed the card", "confirm_duplicates": "yes", "csrf_token": csrf})
    said = flash(confirmed.text)
    assert "requeue: moved to PENDING" in said and "may repeat its side effect" in said
    assert store.get(jobs["failed"]).status is JobStatus.PENDING
    assert store.events(jobs["failed"], events=["requeue"])[-1].detail["allow_duplicate_side_effects"] is True


def test_reconcile_offers_succeeded_and_cancelled(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, csrf = session(store, tokens.admin)
    page = client.get(f"/jobs/{jobs['review']}").text
    assert 'name="resolution" value="succeeded"' in page and 'name="resolution" value="cancelled"' in page
    done = client.post(f"/jobs/{jobs['review']}/actions/reconcile",
                       data={"reason": "checked the bank", "resolution": "cancelled", "csrf_token": csrf})
    assert "reconcile: moved to CANCELLED" in flash(done.text)
    assert store.get(jobs["review"]).status is JobStatus.CANCELLED


def test_a_unique_prefix_opens_the_job(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, _ = session(store, tokens.viewer)
    found = client.get("/jobs/b7e9f0?event=fail", follow_redirects=False)
    assert found.status_code == 303
    assert found.headers["location"] == f"http://testserver/jobs/{jobs['failed']}?event=fail"
    ambiguous = client.get("/jobs/a1b2c3d4")
    assert ambiguous.status_code == 409 and "matches several jobs" in ambiguous.text
    assert client.get("/jobs/b7e9f").status_code == 404  # too short to be a prefix
    assert client.get("/jobs/zzzzzzzz").status_code == 404


def test_the_history_filters_by_event_name(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, _ = session(store, tokens.viewer)
    page = client.get(f"/jobs/{jobs['failed']}").text
    assert '<tr class="ev-claim">' in page and '<tr class="ev-fail">' in page
    assert "<option>claim</option>" in page
    only = client.get(f"/jobs/{jobs['failed']}?event=fail").text
    assert '<tr class="ev-claim">' not in only and '<tr class="ev-fail">' in only
    assert "<option selected>fail</option>" in only


def test_the_job_list_pages_with_a_cursor(store: StateStore, tokens: Tokens) -> None:
    registered = {f"page-job-{i:03d}-{'x' * 30}" for i in range(30)}
    for job_id in registered:
        make_job(store, job_id, queue="bulk")
    client, _ = session(store, tokens.viewer)
    first = client.get("/jobs?queue=bulk&limit=25").text
    ids = re.findall(r"<code>(page-job-\d+-x+)</code>", first)
    assert len(ids) == 25 and set(ids) <= registered  # whole ids, never cut
    after = re.search(r'<a rel="next" href="([^"]+)">Next</a>', first)
    assert after is not None and "queue=bulk" in after.group(1) and "limit=25" in after.group(1)
    second = client.get(after.group(1).replace("&amp;", "&")).text
    rest = re.findall(r"<code>(page-job-\d+-x+)</code>", second)
    assert set(rest) | set(ids) == registered and len(rest) == 5 and 'rel="next"' not in second
    assert ">First page</a>" in second


def test_the_job_list_filters(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client, _ = session(store, tokens.admin)  # the argument search is an admin's (secrets are masked for others)

    def listed(query: str) -> set[str]:
        response = client.get(f"/jobs?{query}")
        assert response.status_code == 200, response.text
        return set(re.findall(r'<td class="id"><a [^>]*><code>([^<]+)</code>', response.text))

    assert listed("") == set(jobs.values())
    assert listed("state=FAILED&state=DEAD") == {jobs["failed"], jobs["dead"]}
    assert listed("queue=billing") == {jobs["billing"], jobs["succeeded"]}
    assert listed("actor=charge") == {jobs["failed"], jobs["review"]}
    assert listed("owner=team-data") == listed("workflow=wf-1") == {jobs["pending"]}
    assert listed("error_class=transient&state=DEAD") == {jobs["dead"]}
    assert listed("search=ACME") == {jobs["pending"]}
    now = store.now()
    assert listed(f"changed_since={iso(now - 3600)}&changed_until={iso(now + 3600)}") == set(jobs.values())
    assert listed(f"changed_since={iso(now + 3600)}") == set()
    bad = client.get("/jobs?changed_since=yesterday")
    assert bad.status_code == 400 and "&#39;changed_since&#39;: &#39;yesterday&#39; is neither epoch seconds nor an " \
        "ISO 8601 time" in bad.text
    assert listed("state=REVIEW") == {jobs["review"]}
    assert set(re.findall(r"<code>([^<]+)</code></a></td>", client.get("/review?actor=charge").text)) == {
        jobs["review"]}


def iso(epoch: float) -> str:
    """An ISO UTC time with Z (as the console shows and accepts)."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_signed_out_pages_lead_to_sign_in_and_back(store: StateStore, tokens: Tokens, jobs: dict[str, str]) -> None:
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    for path in ("/jobs", f"/jobs/{jobs['failed']}", "/dlq", "/overview/live"):
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].endswith(f"/login?next={path}")
    record, token = ApiTokens(store).create("tmp", "viewer")
    assert record.role == "viewer"
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login?next=/dlq").text)
    assert login is not None
    back = client.post("/login?next=/dlq", data={"token": token, "csrf_token": login.group(1)},
                       follow_redirects=False)
    assert back.headers["location"] == "/dlq"


def test_the_console_serves_the_docs(store: StateStore, tokens: Tokens) -> None:
    client, _ = session(store, tokens.viewer)
    listed = client.get("/docs")
    assert listed.status_code == 200 and 'href="http://testserver/docs/worker"' in listed.text
    page = client.get("/docs/worker")
    assert page.status_code == 200 and \
        '<h1 id="reliable-worker-a-supervisor-that-restarts-a-crashed-worker-process"><code>reliable worker</code>:' \
        in page.text
    assert client.get("/docs/nope").status_code == 404
    signed_out = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    assert signed_out.get("/docs", follow_redirects=False).status_code != 200  # behind the sign-in, like every page


def test_list_rows_show_the_last_errors_message_and_filters_fold_when_unset(store: StateStore, tokens: Tokens,
                                                                             jobs: dict[str, str]) -> None:
    """Issue 28, item 6: a row says what went wrong (not only the error's class), and an unfiltered list starts
    with its rows: the filter and bulk forms are folded until a filter is set."""
    client, _ = session(store, tokens.admin)
    plain = client.get("/jobs").text
    row = re.search(rf'<tr>.*?{jobs["failed"]}.*?</tr>', plain, re.S)
    assert row is not None and "ValueError</span> boom" in row.group(0)
    assert '<details class="filter-box">' in plain and '<details class="bulk-box">' in plain
    filtered = client.get("/jobs?actor=charge&state=FAILED").text
    assert '<details class="filter-box" open>' in filtered and "(2 set)" in filtered


def test_the_filter_offers_the_known_queues_and_actors(store: StateStore, tokens: Tokens) -> None:
    make_job(store, "k1", queue="billing", actor="charge")
    make_job(store, "k2", queue="mail", actor="send")
    client, _ = session(store, tokens.viewer)
    for page in ("/jobs", "/dlq"):
        text = client.get(page).text
        assert 'name="queue" value="" list="known-queues"' in text and 'list="known-actors"' in text
        queues = re.search(r'<datalist id="known-queues">(.*?)</datalist>', text)
        actors = re.search(r'<datalist id="known-actors">(.*?)</datalist>', text)
        assert queues and queues.group(1) == '<option value="billing"><option value="mail">'
        assert actors and actors.group(1) == '<option value="charge"><option value="send">'
