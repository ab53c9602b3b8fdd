"""The demo's settings, policy and alert rules (written into the demo's working directory)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ALERT_RULES", "DemoSettings", "demo_policy", "queue_name"]

#: The queues of the story (prefixed per run so leftovers of an earlier run never mix in).
QUEUES = ("inventory", "partner", "imports", "payments", "exports", "maintenance", "webhooks")


def queue_name(prefix: str, name: str) -> str:
    """The broker queue of one of the story's queues."""
    return f"{prefix}{name}"


@dataclass(frozen=True)
class DemoSettings:
    """How one demo run is set up.

    broker_url None: Dramatiq's in-process StubBroker with worker threads (no services needed);
    otherwise a RabbitMQ URL, and the workers are real `dramatiq` processes.
    """

    store_url: str = field(repr=False)  # URLs may hold passwords: shown only through redact_url
    workdir: Path
    broker_url: str | None = field(default=None, repr=False)
    speed: float = 1.0
    alertmanager: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    @property
    def real(self) -> bool:
        """Whether the story runs on RabbitMQ with worker processes."""
        return self.broker_url is not None

    @property
    def prefix(self) -> str:
        """The queue name prefix of this run."""
        return f"demo_{self.run_id}_" if self.real else "demo_"

    def seconds(self, value: float) -> float:
        """A story duration scaled by the speed factor."""
        return value / self.speed

    @property
    def lease_ttl(self) -> float:
        """The demo's lease TTL: short, so a crashed worker's job is recovered within seconds."""
        return max(1.0, self.seconds(2.0))

    @property
    def policy_path(self) -> Path:
        """Where the demo policy is written."""
        return self.workdir / "policy.yaml"

    @property
    def rules_path(self) -> Path:
        """Where the demo alert rules are written."""
        return self.workdir / "alert_rules.yaml"

    @property
    def state_dir(self) -> Path:
        """Files the actors read (e.g. whether the webhook endpoint is back up)."""
        return self.workdir / "world"

    def write_files(self) -> None:
        """Write the policy, alert rules and the actors' state directory into the working directory."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.policy_path.write_text(demo_policy(self), encoding="utf-8")
        self.rules_path.write_text(ALERT_RULES, encoding="utf-8")


def demo_policy(settings: DemoSettings) -> str:
    """The demo policy: the built-in classification, fast backoff and short leases."""
    s = settings.seconds
    ttl = settings.lease_ttl
    return f"""\
# The policy of `reliable demo`: the built-in policy (policies/builtin/default.yaml) made fast, so the story
# fits in a minute. It extends the built-in policy: its rules (429, 5xx, timeouts, bad values...) apply.
version: 1
lease:
  ttl: {ttl:g}
  heartbeat_interval: {max(0.1, ttl * 0.15):g}
  recovery_interval: {max(0.1, s(0.3)):g}
  sweep_after: 10
  retry_grace: 1
defaults:
  owner: team-demo
  max_attempts: 3
  backoff: {{base: {s(1.0):g}, cap: {s(3.0):g}, jitter: equal}}
actors:
  charge_card:
    owner: team-payments
    idempotent: false
    rules:
      # The bank took the request and never answered: the card may or may not have been charged.
      - {{name: maybe-charged, exception: httpx.ReadTimeout, class: side_effect_unknown}}
  export_report: {{owner: team-data, resumable: true, checkpoint_schema: 1}}
  rebuild_index: {{owner: team-search, resumable: true, checkpoint_schema: 1}}
  send_webhook: {{owner: team-integrations}}
"""


#: Store alert rules evaluated over the demo's store (thresholds shrunk to demo time).
ALERT_RULES = """\
rules:
  - name: ReliableDeadLetterGrowth
    kind: store
    condition: {type: dead_letters, window: 10m, min_count: 1}
    severity: warning
    owner: from_job
    route: notify
    annotations:
      summary: "{{ value | int }} job(s) of {{ labels.actor }} dead-lettered in the last 10 min"
    runbook: dead_letter_growth.md.j2

  - name: ReliableReviewQueueAge
    kind: store
    condition: {type: review_age, older_than: 1s}
    severity: info
    owner: from_job
    route: ticket
    annotations:
      summary: "{{ facts.count }} job(s) in queue {{ labels.queue }} wait for a person to review them"
    runbook: review_queue_age.md.j2
"""
