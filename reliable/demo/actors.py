"""The story's jobs: ordinary Dramatiq actors using `reliable.current_job()`.

The partners they call (an inventory service, a rate-limited API, a bank, a webhook endpoint) are
simulated with httpx's MockTransport, so the failures are real httpx exceptions classified by the
real policy; every state the demo shows is written by the real middleware.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dramatiq
import httpx

import reliable

from .config import queue_name

__all__ = ["ACTORS", "EXPORT_PAGES", "INDEX_PAGES", "World", "declare", "story_messages"]

EXPORT_PAGES = 10
INDEX_PAGES = 8
#: The Retry-After (seconds, before the speed factor) the partner API answers its first call with.
RETRY_AFTER = 4.0
WEBHOOK_UP = "webhook-up"


@dataclass
class World:
    """What the actors of one worker share with the director: a state directory, the speed, a freeze switch.

    The freeze switch exists for the in-process demo only: a thread cannot be killed, so "worker-2
    crashed" is played as its thread hanging while its heartbeat is stopped (see workers.StubWorkers).
    """

    state_dir: Path
    speed: float = 1.0
    _frozen: threading.Event = field(default_factory=threading.Event)
    _thawed: threading.Event = field(default_factory=threading.Event)

    def seconds(self, value: float) -> float:
        """A story duration scaled by the speed factor."""
        return value / self.speed

    def work(self, seconds: float) -> None:
        """Spend `seconds` on a unit of work (scaled); hang while frozen."""
        deadline = time.monotonic() + self.seconds(seconds)
        while time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
            if self._frozen.is_set():
                self._thawed.wait()

    def freeze(self) -> None:
        """Make every worker thread of this world hang at its next step."""
        self._frozen.set()

    def thaw(self) -> None:
        """Let the hanging threads go on."""
        self._thawed.set()
        self._frozen.clear()

    @property
    def webhook_up(self) -> bool:
        """Whether the partner fixed their webhook endpoint (the director says so)."""
        return (self.state_dir / WEBHOOK_UP).exists()

    def fix_webhook(self) -> None:
        """The partner's endpoint is back."""
        (self.state_dir / WEBHOOK_UP).touch()


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler), timeout=5.0)


def _bodies(world: World) -> dict[str, Callable[..., None]]:
    """The actor functions, bound to `world`."""

    def sync_inventory(sku: str) -> None:
        """Call the inventory service; it answers 503 once (a transient failure), then 200."""
        job = reliable.current_job()
        status = 503 if job.attempt == 1 else 200
        with _client(lambda request: httpx.Response(status, json={"sku": sku})) as client:
            client.get(f"https://inventory.example/stock/{sku}").raise_for_status()

    def call_partner_api(account: str) -> None:
        """Call a rate-limited partner API: 429 with Retry-After on the first call."""
        job = reliable.current_job()
        wait = str(math.ceil(world.seconds(RETRY_AFTER)))

        def handler(request: httpx.Request) -> httpx.Response:
            if job.attempt == 1:
                return httpx.Response(429, headers={"Retry-After": wait}, json={"error": "slow down"})
            return httpx.Response(200, json={"account": account})

        with _client(handler) as client:
            client.post("https://partner.example/v1/sync", json={"account": account}).raise_for_status()

    def import_contacts(rows: list[str]) -> None:
        """Validate and import contacts; a bad row is invalid input (retrying cannot fix it)."""
        for number, row in enumerate(rows, 1):
            if "@" not in row:
                raise ValueError(f"row {number}: {row!r} is not an email address")

    def charge_card(order: str, cents: int) -> None:
        """Charge a card (not idempotent): the bank times out after receiving the request."""
        job = reliable.current_job()

        def handler(request: httpx.Request) -> httpx.Response:
            raise httpx.ReadTimeout("no answer from the bank after the charge was sent", request=request)

        with _client(handler) as client:
            client.post("https://bank.example/charges", json={"order": order, "amount": cents},
                        headers={"Idempotency-Key": job.operation_key("charge")}).raise_for_status()

    def paged(pages: int, page_seconds: float) -> None:
        job = reliable.current_job()
        for page in range(job.checkpoint_value or 0, pages):
            world.work(page_seconds)
            job.record_effect(f"page-{page + 1}")  # written once, even across attempts
            job.checkpoint(page + 1)  # durable progress; where a pause is observed

    def export_report(account: str, pages: int) -> None:
        """A long export: one page at a time, checkpointing after each; resumable."""
        paged(pages, 0.8)

    def rebuild_index(index: str, pages: int) -> None:
        """A long maintenance job, checkpointing; the worker running it will crash."""
        paged(pages, 0.8)

    def send_webhook(event: str) -> None:
        """Notify a partner; their endpoint refuses connections until they fix it."""
        up = world.webhook_up

        def handler(request: httpx.Request) -> httpx.Response:
            if not up:
                raise httpx.ConnectError("connection refused by hooks.partner.example", request=request)
            return httpx.Response(204)

        with _client(handler) as client:
            client.post("https://hooks.partner.example/events", json={"event": event}).raise_for_status()

    return {f.__name__: f for f in (sync_inventory, call_partner_api, import_contacts, charge_card, export_report,
                                    rebuild_index, send_webhook)}


#: actor name -> its queue (before the prefix).
ACTORS: dict[str, str] = {
    "sync_inventory": "inventory", "call_partner_api": "partner", "import_contacts": "imports",
    "charge_card": "payments", "export_report": "exports", "rebuild_index": "maintenance",
    "send_webhook": "webhooks",
}


def declare(broker: dramatiq.Broker, world: World, prefix: str,
            only: Iterable[str] | None = None) -> dict[str, dramatiq.Actor[Any, Any]]:
    """Declare the story's actors (or `only` some of them) on `broker`; contracts come from the policy."""
    wanted = set(only) if only is not None else set(ACTORS)
    return {name: dramatiq.actor(actor_name=name, queue_name=queue_name(prefix, ACTORS[name]), broker=broker,
                                 time_limit=600_000)(fn)
            for name, fn in _bodies(world).items() if name in wanted}


def story_messages(actors: dict[str, dramatiq.Actor[Any, Any]]) -> dict[str, dramatiq.Message[Any]]:
    """One message per actor present in `actors`: the jobs of the story."""
    args: dict[str, tuple[Any, ...]] = {
        "sync_inventory": ("SKU-1042",), "call_partner_api": ("acme",),
        "import_contacts": (["ann@example.com", "bob(at)example.com"],), "charge_card": ("order-7731", 4_990),
        "export_report": ("acme", EXPORT_PAGES), "rebuild_index": ("products", INDEX_PAGES),
        "send_webhook": ("order.shipped",),
    }
    return {name: actor.message(*args[name]) for name, actor in actors.items()}
