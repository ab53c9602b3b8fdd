"""A payment: an idempotency key from `job.operation_key`, REVIEW when in doubt, a refund on cancel.

Run from the repository root (RabbitMQ up; see examples/shared.py for the environment):

    export RELIABLE_STORE=sqlite:///reliable.db                     # the examples' store, for the CLI
    .venv/bin/reliable db upgrade                                   # once
    .venv/bin/python -m examples.fake_api                           # terminal 1: a fake provider on :8099
    .venv/bin/dramatiq examples.payment_job -p 1 -t 2               # terminal 2: a worker
    .venv/bin/python -m examples.payment_job order-1 4200           # terminal 3: prints the job id
    .venv/bin/reliable jobs events JOB_ID
    .venv/bin/reliable review list                                  # payments that need a person

The contract (actor options here, and the `payments` queue in policies/examples/http_api.yaml,
linked from examples/policies/):

- `idempotent=False`: a crash or lost lease while charging goes to REVIEW (`lease_expired_review`),
  never to an automatic retry: the charge may or may not have happened. So does an HTTP read
  timeout (rule `maybe-charged`: the request may have been processed). A connection error (rule
  `not-sent`: the request never left) is retried; a 402 (rule `card-declined`) fails at once.
- The provider deduplicates on the `Idempotency-Key` header, and the key is
  `job.operation_key("charge")` = "<job_id>:charge": the same on every attempt of this job, so even a
  person who restarts the job from REVIEW (`reliable restart JOB_ID --reason ...`) cannot charge
  twice. `record_effect("charge")` records the charge in the store (`reliable dlq show`/`review show`
  list the job's side effects).
- `compensation="refund_charge"`: `reliable cancel JOB_ID --reason ...` on a job that charged
  already enqueues `refund_charge(job_id)` (for a running job its worker does it when it observes the
  cancel at `job.checkpoint`). The refund carries its own idempotency key.
- Resolve a REVIEW job once you have checked the provider:
  `reliable reconcile JOB_ID --as succeeded --reason "charge ch_1 found in the dashboard"`.
"""

from __future__ import annotations

import sys

import dramatiq
import reliable
from examples import shared
from examples.shared import broker

__all__ = ["broker", "charge_card", "refund_charge"]


@dramatiq.actor(queue_name="payments", owner="team-payments", idempotent=False, compensation="refund_charge")
def charge_card(order_id: str, amount_cents: int) -> None:
    """Charge the order's card once, then send the receipt."""
    job = reliable.current_job()
    if not job.effect_applied("charge"):  # belt and braces: the provider dedups on the key anyway
        response = shared.client.post("/charges", json={"order_id": order_id, "amount_cents": amount_cents},
                                      headers={"Idempotency-Key": job.operation_key("charge")})
        response.raise_for_status()  # 402 -> FAILED, 429/503 -> wait Retry-After, 5xx -> retry
        job.record_effect("charge", result=response.json()["id"])
    job.checkpoint({"charged": True})  # a pause, stop or cancel requested meanwhile is observed here
    shared.client.post("/receipts", json={"order_id": order_id},
                       headers={"Idempotency-Key": job.operation_key("receipt")}).raise_for_status()


@dramatiq.actor(queue_name="payments", owner="team-payments", idempotent=True)
def refund_charge(job_id: str) -> None:
    """Compensation of a cancelled charge_card job: refund every charge it recorded."""
    for effect in shared.RELIABLE.store.effects(job_id):
        if effect.op_key.endswith(":charge"):
            shared.client.post("/refunds", json={"charge_key": effect.op_key},
                               headers={"Idempotency-Key": f"refund:{effect.op_key}"}).raise_for_status()


if __name__ == "__main__":
    order, cents = (sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("order-1", 4200)
    print(charge_card.send(order, cents).message_id)
