"""Review 3 of issue 42: the queue actions page (GET /queues/{queue}/actions) answers 404 for a queue
the Queues page does not list, 400 for a name no queue can have, and reaches a queue whose name
holds ``/``, a space or non-ASCII letters through the Queues page's own link (SQLite and PostgreSQL)."""

from __future__ import annotations

import re

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.store import NewJob, StateStore

from web_support import Tokens, session

NAMES = ("ünï code", "a/b", "x y", "..")


def test_an_unknown_queue_is_a_404_and_a_paused_one_without_jobs_is_known(store: StateStore, tokens: Tokens) -> None:
    queue_pauses.pause(store, "idle", reason="maintenance", identity=Operator("ada", "h", "test"))
    client, _ = session(store, tokens.admin)
    with client:
        unknown = client.get("/queues/nope/actions")
        paused = client.get("/queues/idle/actions")
        blank = client.get("/queues/%20/actions")
    assert unknown.status_code == 404 and "/actions/pause" not in unknown.text  # no Pause form for it
    assert paused.status_code == 200 and "/queues/idle/actions/resume" in paused.text
    assert blank.status_code == 400  # queue_pauses.check_queue_name: it is empty


def test_every_queue_name_is_reachable_from_the_queues_page(store: StateStore, tokens: Tokens) -> None:
    for name in NAMES:
        store.register(NewJob(f"j-{name}", name, "work", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, tokens.admin)
    with client:
        links = re.findall(r'href="([^"#]*/actions)">Pause', client.get("/queues").text)
        assert sorted(link.rsplit("/", 2)[-2] for link in links) == ["%2E%2E", "%C3%BCn%C3%AF%20code", "a%2Fb", "x%20y"]
        headings = []
        for link in links:
            page = client.get(link)
            assert page.status_code == 200, (link, page.status_code)
            headings += re.findall(r"<h1>Queue (.*?)</h1>", page.text)
            form = re.search(r'<form class="inline" method="post" action="([^"]+/actions/pause)"', page.text)
            assert form is not None, link
            done = client.post(form.group(1), data={"reason": "maintenance", "csrf_token": csrf},
                               follow_redirects=False)
            assert done.status_code == 303, (link, done.status_code)
    assert sorted(headings) == sorted(NAMES)
    assert sorted(p.queue for p in queue_pauses.paused(store).pauses) == sorted(NAMES)
