"""The Policy: job contracts and what every failure or crash becomes. Pure once loaded."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..durations import format_duration, parse_duration
from ..errors import PolicyError
from ..options import CONTRACT_OPTIONS, OPTION_RULES, RETRY_OPTIONS
from ..redact import redact_secrets
from .defaults import BUILTIN_PATH, layered
from .fields import CONTRACT_KEYS, build_contract, contract_defaults
from .matching import Rule, class_path, exception_message, is_instance_of_path, truncate
from .model import BUILTIN_CLASSES, ClassSpec, Decision, Failure, JobContract, LeaseSettings
from .routes import Route, route_for
from .schema import PolicySpec, Problem, build_spec
from .source import Document, read_documents
from .timing import backoff_delay, retry_after_of

__all__ = ["THROWS_RULE", "Policy"]

THROWS_RULE = "actor option throws"
"""The rule named in a Decision for an exception the actor declared in `throws=`."""

DRAMATIQ_RETRY = "dramatiq.errors.Retry"


@dataclass(frozen=True)
class Policy:
    """A loaded policy: lease settings, job contracts and the classification rules. Parsed once; immutable."""

    spec: PolicySpec
    lease: LeaseSettings = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lease", self.spec.lease)

    # -- loading ------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None) -> Policy:
        """Load a policy file, a directory of *.yaml / *.yml files (merged in name order), or None: built-in.

        Files extend the built-in policy: their keys override its keys and their rules are tried
        before its rules, unless a file says `inherit: false`. Raises PolicyError (one line naming
        file, line and field) for the first problem found.
        """
        return cls.from_documents(layered([] if path is None else read_documents(path)))

    @classmethod
    def from_documents(cls, documents: list[Document], *,
                       subclass: Mapping[tuple[str, str], bool] | None = None) -> Policy:
        """A policy from documents already read, as given (`defaults.layered` puts the built-in one under them).

        Raises PolicyError for the first problem.
        """
        spec, problems = build_spec(documents, subclass=subclass)
        if problems or spec is None:
            raise _first(problems).error()
        return cls(spec)

    @property
    def sources(self) -> tuple[str, ...]:
        """The files this policy was read from (or "<built-in>")."""
        return self.spec.sources

    @property
    def inherits(self) -> bool:
        """Whether this policy extends the built-in one (False when a file says `inherit: false`)."""
        return self.spec.inherits

    @property
    def lanes(self) -> tuple[str, ...]:
        """Every queue this policy routes retries to (sorted): a worker declares them at boot so that
        one started with `--queues <lane>` consumes that lane."""
        queues = {spec.queue for spec in self.spec.classes.values() if spec.queue}
        queues.update(rule.queue for _, rule in self.spec.all_rules() if rule.queue)
        return tuple(sorted(queues))

    @property
    def classes(self) -> Mapping[str, ClassSpec]:
        """Every error class this policy knows, by name."""
        return self.spec.classes

    # -- contracts ----------------------------------------------------------------------------

    def contract(self, actor: str, queue: str, options: Mapping[str, Any] = {}, *, strict: bool = False) -> JobContract:
        """The job contract of `actor` on `queue`.

        Precedence, lowest first: built-in defaults, the policy's `defaults`, `queues.<queue>`,
        `actors.<actor>`, then the Dramatiq actor options (`owner`, `idempotent`, `resumable`,
        `checkpoint_schema`, `stop_grace` (seconds or "30s"), `max_retries` (= max_attempts - 1),
        `max_attempts`, `compensation`, `retry_on_crash`, `resume_validator`, and Dramatiq's
        `min_backoff` / `max_backoff` in milliseconds: min_backoff is the backoff base and a floor,
        max_backoff the cap). `retry_on_crash` left unset follows `idempotent`. Pass the actor's
        declared options (`reliable.options.contract_options` adds the retry options a message may set).
        `fast_path` is dropped for resumable or non-idempotent jobs; `strict=True` (an actor's
        declaration) raises PolicyError instead.
        """
        flat = contract_defaults()
        flat.update(self.spec.defaults)
        for section in (self.spec.queues.get(queue), self.spec.actors.get(actor)):
            if section is not None:
                flat.update(section.overrides)
        flat.update(_actor_options(actor, options))
        if flat["backoff.base"] > flat["backoff.cap"]:
            flat["backoff.base"] = flat["backoff.cap"]
        if flat["fast_path"] and (flat["resumable"] or not flat["idempotent"]):
            # Refused loudly where the actor is declared (strict); anywhere else (a job stored
            # under an older declaration, a policy default) the durable path applies.
            if strict:
                why = ("a resumable actor needs the checkpoints a claim's lease gives" if flat["resumable"] else
                       "a duplicate delivery may run twice on the fast path: declare idempotent actors only")
                raise PolicyError(f"actor {actor!r}: fast_path=True is refused: {why}", field="fast_path")
            flat["fast_path"] = False
        return build_contract(flat)

    # -- classification -----------------------------------------------------------------------

    def rules_for(self, actor: str, queue: str) -> tuple[Rule, ...]:
        """The rules tried for a failure of `actor` on `queue`, in order: actor, queue, then global rules."""
        rules: list[Rule] = []
        for section in (self.spec.actors.get(actor), self.spec.queues.get(queue)):
            if section is not None:
                rules.extend(section.rules)
        rules.extend(self.spec.rules)
        return tuple(rules)

    def classify(self, exc: BaseException, actor: str, queue: str,
                 contract: JobContract | None = None) -> tuple[str, Rule | None, str | None]:
        """(error class, matching rule or None, rule label or None) for `exc`; first match wins.

        Rules with an `idempotent` condition only apply when the job's contract agrees.
        """
        contract = contract or self.contract(actor, queue)
        for rule in self.rules_for(actor, queue):
            if rule.matches(exc, idempotent=contract.idempotent):
                return rule.error_class, rule, rule.label
        if is_instance_of_path(exc, DRAMATIQ_RETRY):
            return "transient", None, f"{BUILTIN_PATH} (dramatiq-retry)"
        return contract.fallback_class, None, None

    # -- decisions ----------------------------------------------------------------------------

    def decide(self, failure: Failure) -> Decision:
        """What becomes of a failed attempt: retry (with delay), fail, review, dead or halt.

        An exception the actor declares in Dramatiq's `throws` fails the job at once. Otherwise the
        policy's class decides; for a class that retries, Dramatiq's `retry_when` (when declared)
        replaces the max_attempts count.
        """
        exc, contract = failure.exception, failure.contract
        error_class, rule, label = self.classify(exc, failure.actor, failure.queue, contract)
        spec = self.spec.classes.get(error_class) or BUILTIN_CLASSES["transient"]
        common: dict[str, Any] = {
            "error_class": error_class, "rule": label, "exception_type": class_path(type(exc)),
            "message": redact_secrets(truncate(exception_message(exc))), "attempt": failure.attempt,
            "retry_count": failure.retry_count,
        }
        if failure.throws and isinstance(exc, failure.throws):
            return Decision(action="fail", delay=None, alert=False,
                            reason=f"{type(exc).__name__} is declared in the actor's throws: the job fails "
                                   "without a retry", **{**common, "rule": THROWS_RULE})
        matched = f"rule {label}" if label else "no rule matched (default class)"
        if spec.action != "retry":
            reasons = {
                "fail": f"{error_class} does not get better by retrying ({matched}): the job fails",
                "review": f"{error_class}: a side effect may have happened ({matched}); a person must reconcile",
                "dead": f"{error_class} goes straight to the dead letters ({matched})",
                "halt": f"{error_class} ({matched}): the job is stopped and the owner alerted",
            }
            return Decision(action=spec.action, delay=None, reason=reasons[spec.action],
                            alert=spec.alert or spec.action == "halt", **common)
        route = route_for(spec, rule)
        if spec.rate_limited:
            return _routed(self._rate_limited(failure, contract, common), route, failure.rate_limited_retries + 1)
        failures = max(1, failure.attempt - failure.rate_limited_retries)
        if failure.retry_when is not None:
            if not failure.retry_when(failures - 1, exc):
                return Decision(action="dead", delay=None, alert=spec.alert, retries_exhausted=True,
                                reason=f"{error_class} on failed attempt {failures} ({matched}): the actor's "
                                       "retry_when said no more retries", **common)
        elif failures >= contract.max_attempts:
            return Decision(action="dead", delay=None, alert=spec.alert, retries_exhausted=True,
                            reason=f"{error_class} on failed attempt {failures} of {contract.max_attempts} "
                                   f"({matched}): no attempts left", **common)
        delay = backoff_delay(contract.backoff, failures - 1, failure.rand)
        note = f"backoff {contract.backoff.jitter} jitter"
        retry_delay = getattr(exc, "delay", None) if is_instance_of_path(exc, DRAMATIQ_RETRY) else None
        if isinstance(retry_delay, int | float) and not isinstance(retry_delay, bool) and retry_delay >= 0:
            delay, note = float(retry_delay) / 1000.0, "the delay dramatiq.Retry asked for"
        of = "allowed by retry_when" if failure.retry_when is not None else f"of {contract.max_attempts - 1}"
        reason = f"{error_class} ({matched}): retry {failures} {of} in {format_duration(delay)} ({note})"
        return _routed(self._budgeted(failure, contract, delay, reason, spec.alert, common), route, failures)

    def _rate_limited(self, failure: Failure, contract: JobContract, common: dict[str, Any]) -> Decision:
        limits = contract.rate_limit
        count = failure.rate_limited_retries + 1
        label = common["error_class"]
        if failure.rate_limited_retries >= limits.max_retries:
            return Decision(action="dead", delay=None, alert=True, rate_limited=True,
                            reason=f"{label}: rate limited {count} times, over the cap of {limits.max_retries} "
                                   "rate-limited retries", **common)
        waited = retry_after_of(failure.exception, failure.now)
        if waited is not None:
            delay = min(waited, limits.max_wait)
            note = "Retry-After" + (f", capped by max_wait {format_duration(limits.max_wait)}"
                                    if waited > limits.max_wait else "")
        else:
            delay = min(backoff_delay(contract.backoff, failure.rate_limited_retries, failure.rand), limits.max_wait)
            note = "no usable Retry-After: backoff"
        sustained = count >= limits.alert_after
        reason = (f"{label}: rate-limited retry {count} (not counted as a failure) in {format_duration(delay)} "
                  f"({note})" + ("; rate limiting is sustained" if sustained else ""))
        decision = self._budgeted(failure, contract, delay, reason, sustained, common)
        return _replace(decision, rate_limited=True)

    def _budgeted(self, failure: Failure, contract: JobContract, delay: float, reason: str, alert: bool,
                  common: dict[str, Any]) -> Decision:
        budget = contract.retry_budget
        if budget is None or failure.recent_retries < budget.per_minute:
            return Decision(action="retry", delay=delay, reason=reason, alert=alert, **common)
        spent = f"retry budget of {failure.actor} exhausted ({failure.recent_retries} retries in the last minute, " \
                f"budget {budget.per_minute})"
        if budget.on_exhausted == "dead":
            return Decision(action="dead", delay=None, reason=f"{spent}: dead letter instead of a retry", alert=True,
                            budget_exhausted=True, **common)
        longer = max(delay, budget.delay)
        return Decision(action="retry", delay=longer, alert=True, budget_exhausted=True,
                        reason=f"{spent}: retry delayed to {format_duration(longer)}", **common)

    def decide_crash(self, *, contract: JobContract, attempt: int, actor: str, queue: str,
                     rand: Any = None) -> Decision:
        """What becomes of attempt `attempt` (1-based) after a worker crash or a lease expiry."""
        common: dict[str, Any] = {"error_class": "crash", "rule": None, "attempt": attempt}
        if not contract.retry_on_crash:
            return Decision(action="review", delay=None, alert=False,
                            reason=f"attempt {attempt} crashed and {actor} is not idempotent (and retry_on_crash is "
                                   "not set): a side effect may have happened; a person must reconcile", **common)
        if attempt >= contract.max_attempts:
            return Decision(action="dead", delay=None, alert=False, retries_exhausted=True,
                            reason=f"attempt {attempt} of {contract.max_attempts} crashed: no attempts left", **common)
        if contract.on_crash == "retry":
            delay = backoff_delay(contract.backoff, attempt - 1, rand)
            return Decision(action="retry", delay=delay, alert=False,
                            reason=f"attempt {attempt} crashed: retry from the last checkpoint in "
                                   f"{format_duration(delay)}", **common)
        return Decision(action="requeue", delay=None, alert=False,
                        reason=f"attempt {attempt} crashed: requeued now, resuming from the last checkpoint", **common)


def _routed(decision: Decision, route: Route | None, retry: int) -> Decision:
    """`decision` with the queue its retry waits on, when `route` sends retry number `retry` elsewhere."""
    lane = route.lane(retry) if route is not None and decision.action == "retry" else None
    if lane is None:
        return decision
    assert route is not None
    return _replace(decision, queue=lane, reason=f"{decision.reason}; it waits on queue {lane} "
                                                 f"(routed by {route.source})")


def _replace(decision: Decision, **changes: Any) -> Decision:
    from dataclasses import replace

    return replace(decision, **changes)


def _first(problems: list[Problem]) -> Problem:
    return problems[0] if problems else Problem("<policy>", None, "", "invalid policy")


def _actor_options(actor: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Contract overrides from Dramatiq actor options (PolicyError naming the actor and option when wrong)."""
    out: dict[str, Any] = {}
    for key in (*CONTRACT_OPTIONS, *RETRY_OPTIONS):
        if key not in options:
            continue
        value = options[key]
        try:
            if key in OPTION_RULES and value is not None and (problem := OPTION_RULES[key](value)) is not None:
                raise ValueError(problem)  # the rule a message's option is held to (reliable.options)
            if key == "max_retries":
                out["max_attempts"] = CONTRACT_KEYS["max_attempts"](value + 1 if isinstance(value, int) else value)
            elif key in ("min_backoff", "max_backoff"):
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ValueError(f"expected milliseconds (a number >= 0), got {value!r}")
                if key == "min_backoff":  # Dramatiq's minimum: the base of the backoff and a floor
                    out["backoff.base"] = out["backoff.floor"] = float(value) / 1000.0
                else:
                    out["backoff.cap"] = float(value) / 1000.0
            elif key == "stop_grace":
                out[key] = parse_duration(value)
            else:
                out[key] = CONTRACT_KEYS[key](value)
        except ValueError as exc:
            raise PolicyError(f"actor {actor!r} option {key}: {exc}", field=key) from None
    return out
