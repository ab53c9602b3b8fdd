"""Worker shutdown: nothing of reliable's publishes while Dramatiq stops its consumers."""

from __future__ import annotations

import threading
from typing import Any, cast

from reliable.middleware import ReliableMiddleware


def test_worker_shutdown_waits_for_the_recovery_pass_in_flight(sqlite_url: str) -> None:
    """CI saw `RuntimeError: dictionary changed size during iteration` in Dramatiq's Worker.stop: a
    recovery pass re-dispatched a job to a queue the broker had not declared, and the worker added
    a consumer while stop() iterated them. before_worker_shutdown now lets the pass end first."""
    middleware = ReliableMiddleware(sqlite_url, recovery=False, metrics=False, json_logs=False)
    proceed = threading.Event()
    published: list[str] = []

    def pass_in_flight() -> None:
        middleware._recovery_stop.wait(10)
        proceed.wait(10)  # still publishing after the stop was asked
        published.append("re-dispatch")

    middleware._recovery_thread = threading.Thread(target=pass_in_flight)
    middleware._recovery_thread.start()
    releaser = threading.Timer(0.3, proceed.set)
    releaser.start()
    middleware.before_worker_shutdown(cast(Any, None), None)
    assert published == ["re-dispatch"], "the pass ended before Dramatiq goes on to stop its consumers"
    assert not middleware._recovery_thread.is_alive()
    releaser.join()
