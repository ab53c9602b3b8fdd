"""Alert lifecycle: pending -> firing -> resolved, honouring `for`, plus the delivery schedule. Pure.

Follows Prometheus' notifier model: a firing alert is re-sent every `resend_interval` with
`endsAt = now + 4 x max(evaluation_interval, resend_interval)` (so Alertmanager keeps it while we
are alive and expires it if we die); a resolved alert is sent with `endsAt` = the resolution time
and re-sent for `resolved_resend_for`. A failed delivery is retried with exponential backoff; the
alert stays in the store until delivered, so nothing is lost while Alertmanager is down.

What is sent is bounded (`payload`): a label value longer than MAX_LABEL_VALUE characters is cut
and ends with a digest of the whole value (two label sets that differ after the cut stay two
alerts), an annotation longer than MAX_ANNOTATION is cut with a marker. The store keeps them whole.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..isotime import format_time
from .model import Candidate

__all__ = ["MAX_ANNOTATION", "MAX_LABEL_VALUE", "AlertState", "DeliveryPolicy", "advance", "after_send",
           "bounded_labels", "due", "payload"]

#: The longest label value and annotation sent to Alertmanager, in characters (see the module doc).
MAX_LABEL_VALUE = 256
MAX_ANNOTATION = 4096

PENDING, FIRING, RESOLVED = "pending", "firing", "resolved"


@dataclass(frozen=True)
class DeliveryPolicy:
    """Timings of evaluation and delivery, in seconds."""

    evaluation_interval: float = 30.0
    resend_interval: float = 60.0
    resolved_resend_for: float = 900.0
    backoff_initial: float = 5.0
    backoff_max: float = 300.0

    def backoff(self, attempts: int) -> float:
        """The wait after the `attempts`-th consecutive failure: doubling from backoff_initial, capped."""
        return float(min(self.backoff_max, self.backoff_initial * 2 ** max(0, attempts - 1)))

    @property
    def firing_ttl(self) -> float:
        """How long Alertmanager keeps a firing alert we stop re-sending (endsAt - now)."""
        return 4 * max(self.evaluation_interval, self.resend_interval)


@dataclass(frozen=True)
class AlertState:
    """One alert as kept in `reliable_alerts` (one row per label set)."""

    fingerprint: str
    alertname: str
    labels: Mapping[str, str]
    state: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    pending_since: float | None = None
    starts_at: float | None = None
    ends_at: float | None = None
    last_evaluated_at: float | None = None
    last_sent_at: float | None = None
    next_send_at: float | None = None
    send_attempts: int = 0
    last_error: str | None = None


def _step(prev: AlertState | None, candidate: Candidate, now: float) -> AlertState:
    for_seconds = candidate.rule.for_seconds
    if prev is None or prev.state == RESOLVED:
        base = prev or AlertState(candidate.fingerprint, candidate.rule.name, dict(candidate.labels), PENDING)
        new = replace(base, state=PENDING, pending_since=now, starts_at=None, ends_at=None, next_send_at=None,
                      send_attempts=0, last_error=None)
    else:
        new = prev
    new = replace(new, labels=dict(candidate.labels), alertname=candidate.rule.name, last_evaluated_at=now)
    if new.state == PENDING and now - (new.pending_since or now) >= for_seconds:
        new = replace(new, state=FIRING, starts_at=now, next_send_at=now)
    return new


def advance(previous: Mapping[str, AlertState], candidates: list[Candidate], now: float,
            policy: DeliveryPolicy) -> tuple[dict[str, AlertState], set[str]]:
    """Apply one evaluation: (states that changed or remain, fingerprints to delete).

    Present candidates become pending, then firing once they held for the rule's `for`. A pending
    alert that no longer holds is dropped silently; a firing one becomes resolved (sent at once).
    A resolved alert is deleted once its resolution was delivered and re-sent for the whole
    `resolved_resend_for` (never before it was delivered at least once).
    """
    states: dict[str, AlertState] = {}
    deleted: set[str] = set()
    for candidate in candidates:
        fp = candidate.fingerprint
        states[fp] = _step(states.get(fp) or previous.get(fp), candidate, now)
    for fp, prev in previous.items():
        if fp in states:
            continue
        if prev.state == PENDING:
            deleted.add(fp)
        elif prev.state == FIRING:
            states[fp] = replace(prev, state=RESOLVED, ends_at=now, next_send_at=now, last_evaluated_at=now)
        else:
            delivered = prev.last_sent_at is not None and prev.ends_at is not None and prev.last_sent_at >= prev.ends_at
            if delivered and prev.next_send_at is None:
                deleted.add(fp)
            else:
                states[fp] = replace(prev, last_evaluated_at=now)
    return states, deleted


def due(state: AlertState, now: float) -> bool:
    """Whether `state` should be sent to Alertmanager now."""
    return state.state in (FIRING, RESOLVED) and state.next_send_at is not None and state.next_send_at <= now


def after_send(state: AlertState, now: float, policy: DeliveryPolicy, error: str | None = None) -> AlertState:
    """The state after a delivery attempt: next resend on success, backoff on failure."""
    if error is not None:
        attempts = state.send_attempts + 1
        return replace(state, send_attempts=attempts, last_error=error[:500],
                       next_send_at=now + policy.backoff(attempts))
    next_send: float | None = now + policy.resend_interval
    if state.state == RESOLVED and (state.ends_at is None or now + policy.resend_interval > state.ends_at
                                    + policy.resolved_resend_for):
        next_send = None
    return replace(state, last_sent_at=now, send_attempts=0, last_error=None, next_send_at=next_send)


def _rfc3339(epoch: float) -> str:
    return format_time(epoch, ms=True)


def _label_value(value: str) -> str:
    if len(value) <= MAX_LABEL_VALUE:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{value[:MAX_LABEL_VALUE - 16]}...~{digest}"


def bounded_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """`labels` as they are sent: each value cut to MAX_LABEL_VALUE characters (with its digest)."""
    return {name: _label_value(str(value)) for name, value in labels.items()}


def _annotation(value: str) -> str:
    if len(value) <= MAX_ANNOTATION:
        return value
    marker = f"... [cut: {len(value)} chars]"
    return value[:MAX_ANNOTATION - len(marker)] + marker


def payload(state: AlertState, now: float, policy: DeliveryPolicy, generator_url: str | None = None) -> dict[str, Any]:
    """The Alertmanager API v2 object for `state` (an element of the POST /api/v2/alerts array), its
    label values and annotations cut to MAX_LABEL_VALUE and MAX_ANNOTATION characters."""
    ends = state.ends_at if state.state == RESOLVED and state.ends_at is not None else now + policy.firing_ttl
    item: dict[str, Any] = {
        "labels": bounded_labels(state.labels),
        "annotations": {name: _annotation(str(value)) for name, value in state.annotations.items()},
        "startsAt": _rfc3339(state.starts_at if state.starts_at is not None else now),
        "endsAt": _rfc3339(ends),
    }
    if generator_url:
        item["generatorURL"] = generator_url
    return item
