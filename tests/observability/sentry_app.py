"""Run by tests/observability/test_sentry_spans.py in a process of its own (Sentry's integrations patch
Dramatiq's Broker and SQLAlchemy's Engine class for the life of a process): an app with Sentry's
Dramatiq and SQLAlchemy integrations, reliable installed on a StubBroker with the store at $STORE,
and a task that uses the app's own engine ($APP_DB), checkpoints, records an effect and sends a
follow-up. Prints, as JSON, the spans (op, description) of each transaction Sentry would have sent
(SENTRY_STREAM=1: span streaming, each span sent alone, printed as a transaction of that name)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.dramatiq import DramatiqIntegration
from sentry_sdk.integrations.sqlalchemy import SqlalchemyIntegration
from sentry_sdk.transport import Transport


class Captured(Transport):
    """Keeps every envelope in memory instead of sending it."""

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)


def main() -> None:
    transport = Captured()
    streaming = {"trace_lifecycle": "stream"} if os.environ.get("SENTRY_STREAM") == "1" else {}
    sentry_sdk.init(dsn="http://public@127.0.0.1/1", transport=transport, traces_sample_rate=1.0,
                    default_integrations=False, integrations=[DramatiqIntegration(), SqlalchemyIntegration()],
                    **streaming)

    import dramatiq
    from dramatiq.brokers.stub import StubBroker
    from sqlalchemy import create_engine, text

    import reliable
    from reliable.testing import Harness

    broker = StubBroker()  # after sentry_sdk.init: its Dramatiq integration adds its middleware here
    policy = Path(os.environ["POLICY_DIR"], "policy.yaml")
    policy.write_text("version: 1\ndefaults:\n  backoff: {base: 20ms, cap: 50ms}\n")
    reliable.install(broker, store=os.environ["STORE"], policies=str(policy), recovery=False, json_logs=False,
                     metrics=False)
    dramatiq.set_broker(broker)
    app_engine = create_engine(os.environ["APP_DB"])

    @dramatiq.actor(resumable=True)
    def follow_up() -> None:
        """Nothing: sent by the task."""

    @dramatiq.actor(resumable=True)
    def task() -> None:
        """The app's own query, then reliable's store work from inside the task."""
        with app_engine.connect() as conn:
            conn.execute(text("SELECT 42 AS the_apps_own_query"))
        job = reliable.current_job()
        job.record_effect("unit")
        job.checkpoint(1)
        follow_up.send()
        if job.attempt == 1:
            raise ConnectionError("the first attempt fails: a retry")

    task.send()
    Harness(broker).run_until_idle(timeout=30, fail_fast=True)
    sentry_sdk.flush(timeout=5)
    transactions = []
    for envelope in transport.envelopes:
        for item in envelope.items:
            event = item.get_transaction_event()
            if event is not None:
                transactions.append({"name": event.get("transaction"),
                                     "spans": [[s.get("op"), s.get("description")] for s in event.get("spans", [])]})
            elif item.type == "span" and item.payload.json is not None:  # span streaming: one item per span
                transactions.extend({"name": span["name"], "spans": []} for span in item.payload.json["items"])
    print(json.dumps(transactions))


if __name__ == "__main__":
    main()
