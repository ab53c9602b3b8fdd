"""One catalogue (issue 41, item 1 and its bad inputs): each shipped condition is defined once, by
one engine, with its owner and runbook; `reliable alerts check` refuses two enabled rules that
evaluate the same condition, a reliable metric that does not exist, a label its series lack and a
fixed owner its jobs never carry, naming file and line; the series table matches the registries.

Measured on main: 9 of the 14 store rules repeated a PromQL rule with the same runbook (one incident
paged twice, to "platform" and to the team), and `check` accepted it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import CollectorRegistry

from reliable.alerts import load_rules, parse_rules
from reliable.alerts.promql import OWNER_INFO, export_rule_groups
from reliable.alerts.series import SERIES, check_expr
from reliable.cli.main import cli
from reliable.collector import StoreCollector
from reliable.errors import PolicyError
from reliable.metrics import Metrics, _collectors_for
from reliable.store import NewJob, StateStore
from reliable.supervisor.metrics import SupervisorMetrics

ROOT = Path(__file__).resolve().parents[2]

#: The shipped catalogue: condition -> (engine, owner label, runbook). PromQL "from_job:L" joins the
#: owner of the actor's jobs on the labels L (reliable_actor_owner).
CATALOGUE = {
    "ReliableHeartbeatFailures": ("promql", "platform", "heartbeat_failures.md.j2"),
    "ReliableLeaseExpiriesHigh": ("promql", "from_job:queue,actor", "lease_expiry_rate.md.j2"),
    "ReliableStaleCommits": ("promql", "from_job:queue,actor", "stale_commits.md.j2"),
    "ReliableDuplicateEffects": ("promql", "from_job:queue,actor", "duplicate_effects.md.j2"),
    "ReliableRetryStorm": ("promql", "from_job:queue,actor", "retry_storm.md.j2"),
    "ReliableRetryBudgetExhausted": ("promql", "from_job:queue,actor", "retry_budget_exhausted.md.j2"),
    "ReliableDispatchLatencyHigh": ("promql", "from_job:queue,actor", "dispatch_latency.md.j2"),
    "ReliableErrorBudgetBurnFast": ("promql", "from_job:actor", "error_budget_burn_fast.md.j2"),
    "ReliableErrorBudgetBurnSlow": ("promql", "from_job:actor", "error_budget_burn_slow.md.j2"),
    "ReliableConcurrencyReduced": ("promql", "from_job:actor", "concurrency_reduced.md.j2"),
    "ReliableWorkerChildCrashing": ("promql", "platform", "worker_child_crashing.md.j2"),
    "ReliableQueueConsumersWithoutWorkerRecord": ("promql", "platform",
                                                  "queue_consumers_without_worker_record.md.j2"),
    "ReliableQueuePausedTooLong": ("promql", "platform", "queue_paused_too_long.md.j2"),
    "ReliableJobStuck": ("store", "from_job", "job_stuck.md.j2"),
    "ReliableCheckpointLag": ("store", "from_job", "checkpoint_lag.md.j2"),
    "ReliableDeadLetterGrowth": ("store", "from_job", "dead_letter_growth.md.j2"),
    "ReliableReviewQueueAge": ("store", "from_job", "review_queue_age.md.j2"),
    "ReliableActorFailureRate": ("store", "from_job", "actor_failure_rate.md.j2"),
    "ReliableActorRepeatedFailures": ("store", "from_job", "actor_repeated_failures.md.j2"),
    "ReliableQueueAge": ("store", "from_job", "queue_age.md.j2"),
    "ReliableScheduleLateness": ("store", "from_job", "schedule_lateness.md.j2"),
    "ReliableScheduleSlotMissed": ("store", "from_job", "schedule_missed.md.j2"),
}


def test_the_shipped_catalogue_defines_each_condition_once() -> None:
    rules = load_rules(ROOT / "alert_rules")  # refuses duplicates itself
    found = {}
    for rule in rules:
        owner = rule.owner
        if rule.owner_from_job and rule.kind == "promql":
            owner = "from_job:" + ",".join(rule.condition.owner_on)  # type: ignore[union-attr]
        found[rule.name] = (rule.kind, owner, rule.runbook)
    assert found == CATALOGUE
    # Every PromQL alert about jobs carries their owner: its export joins it from the info series.
    for group in export_rule_groups(rules)["groups"]:
        for exported in group["rules"]:
            _, owner, _ = CATALOGUE[exported["alert"]]
            assert ("owner" in exported["labels"]) == (not owner.startswith("from_job"))
            assert (OWNER_INFO in exported["expr"]) == owner.startswith("from_job")


PAIR = """\
rules:
  - name: DeadLettersStore
    kind: store
    condition: {type: dead_letters, window: 30m}
    severity: warning
    owner: from_job
    route: notify
    runbook: dead_letter_growth.md.j2
"""
PROMQL_TWIN = """\
rules:
  - name: DeadLettersPromql
    kind: promql
    condition:
      expr: sum by (queue, actor) (increase(reliable_dead_letters_total[30m])) > 0
      owner_on: [queue, actor]
    severity: warning
    owner: from_job
    route: notify
    runbook: {runbook}
{extra}"""


def _check(tmp_path: Path, *texts: str, store: str | None = None) -> tuple[int, str]:
    for i, text in enumerate(texts):
        (tmp_path / f"{i}-rules.yaml").write_text(text)
    args = ["alerts", "check", str(tmp_path)] + (["--store", store] if store else [])
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


def test_check_refuses_two_rules_evaluating_one_condition(tmp_path: Path) -> None:
    code, out = _check(tmp_path, PAIR, PROMQL_TWIN.format(runbook="dead_letter_growth.md.j2", extra=""))
    assert code == 2
    assert f"{tmp_path}/1-rules.yaml:2: rules 'DeadLettersStore' ({tmp_path}/0-rules.yaml:2) and " \
           "'DeadLettersPromql' evaluate the same condition (runbook 'dead_letter_growth.md.j2')" in out, out


def test_check_refuses_one_declared_key_twice_and_allows_a_disabled_twin(tmp_path: Path) -> None:
    keyed = PAIR.replace("    runbook: dead_letter_growth.md.j2\n",
                         "    runbook: dead_letter_growth.md.j2\n    key: dead\n")
    code, out = _check(tmp_path, keyed, PROMQL_TWIN.format(runbook="retry_storm.md.j2", extra="    key: dead\n"))
    assert code == 2 and "evaluate the same condition (key 'dead')" in out, out
    (tmp_path / "1-rules.yaml").unlink()
    code, out = _check(tmp_path, keyed, PROMQL_TWIN.format(runbook="dead_letter_growth.md.j2",
                                                          extra="    enabled: false\n"))
    assert code == 0, out
    disabled = next(r for r in load_rules(tmp_path) if not r.enabled)
    assert export_rule_groups([disabled]) == {"groups": []}  # kept in the file, exported nowhere


@pytest.mark.parametrize(("expr", "words"), [
    ("sum by (queue) (rate(reliable_heartbeat_failures_total[5m])) > 0",
     "label 'queue' is on none of the series the expression reads (reliable_heartbeat_failures_total)"),
    ("sum(increase(reliable_dead_letter_total[30m])) > 0", "unknown metric 'reliable_dead_letter_total'"),
    ('sum(rate(reliable_retries_total{errorclass="x"}[5m])) > 0', "label 'errorclass' is on none"),
])
def test_check_names_file_and_line_of_a_series_mistake(tmp_path: Path, expr: str, words: str) -> None:
    text = f"rules:\n  - name: Bad\n    kind: promql\n    condition:\n      expr: '{expr}'\n" \
           "    severity: info\n    owner: t\n    route: ticket\n"
    code, out = _check(tmp_path, text)
    assert code == 2 and f"0-rules.yaml:5: {words}" in out, out


def test_series_checks_accept_what_reliable_exports() -> None:
    assert check_expr("histogram_quantile(0.99, sum by (queue, actor, le) "
                      "(rate(reliable_dispatch_latency_seconds_bucket[5m]))) > 30") == []
    assert check_expr('sum by (instance) (increase(reliable_worker_restarts_total{reason="crash"}[15m]))') == []
    assert check_expr("up == 0") == []  # not reliable's: not checked


@pytest.mark.parametrize(("text", "words"), [
    ("owner: from_job\n", "owner: from_job on a PromQL rule needs condition.owner_on"),
    ("owner: team-a\n", "condition.owner_on joins the owner of the jobs: it needs owner: from_job"),
])
def test_promql_owner_join_is_declared(text: str, words: str) -> None:
    rule = PROMQL_TWIN.format(runbook="x.md.j2", extra="").replace("    owner: from_job\n", "    owner: " + text[7:])
    if "team-a" not in text:
        rule = rule.replace("      owner_on: [queue, actor]\n", "")
    with pytest.raises(PolicyError, match=words):
        parse_rules(rule, "r.yaml")


def test_check_with_a_store_refuses_an_owner_its_jobs_never_carry(tmp_path: Path, store_url: str) -> None:
    store = StateStore(store_url)
    try:
        store.register(NewJob(job_id="p1", queue="payments", actor="charge", message={}, owner="team-payments"))
    finally:
        store.close()
    text = ('rules:\n  - name: PaymentsDown\n    kind: promql\n    condition:\n'
            '      expr: max by (queue) (reliable_review_jobs{queue="payments"}) > 0\n'
            '    severity: critical\n    owner: team-billing\n    route: page\n    runbook: review_queue_age.md.j2\n')
    code, out = _check(tmp_path, text, store=store_url)
    assert code == 2 and "0-rules.yaml:2: owner 'team-billing': the jobs this rule is about (queue=\"payments\") " \
                         "never carry it (their owners: team-payments)" in out, out
    (tmp_path / "0-rules.yaml").write_text(text.replace("team-billing", "team-payments"))
    assert _check(tmp_path, store=store_url)[0] == 0


def test_the_series_table_matches_the_registries(store: StateStore) -> None:
    registry = CollectorRegistry()
    collectors = _collectors_for(registry)
    supervisor = SupervisorMetrics(registry, 1)
    metrics = [getattr(collectors, name) for name in collectors.__dataclass_fields__]
    metrics += [supervisor.children, supervisor.children_up, supervisor.restarts, supervisor.last_exit_code]
    exported: dict[str, tuple[str, ...]] = {}
    for metric in metrics:
        suffix = "_total" if type(metric).__name__ == "Counter" else ""
        exported[metric._name + suffix] = tuple(metric._labelnames)
    store.register(NewJob(job_id="j", queue="q", actor="a", message={}))
    for family in StoreCollector(store).collect():
        labels = {k for s in family.samples for k in s.labels}
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in SERIES, name
        assert labels <= set(SERIES[name]), (name, labels)
    for name, labels in exported.items():
        assert name in SERIES and sorted(SERIES[name]) == sorted(labels), (name, labels)


def test_workers_name_each_actors_owner() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    metrics.track("charge", "payments", owner="team-payments")
    metrics.track("send", "mail")
    assert registry.get_sample_value(OWNER_INFO, {"actor": "charge", "queue": "payments",
                                                  "owner": "team-payments"}) == 1
    assert registry.get_sample_value(OWNER_INFO, {"actor": "send", "queue": "mail", "owner": "unowned"}) == 1


def test_runbook_links_open_the_console_when_it_is_configured(tmp_path: Path) -> None:
    from reliable.alerts.config import load_config

    settings = tmp_path / "alerts.yaml"
    settings.write_text("console_url: https://reliable.example/console/\n")
    assert load_config(settings).runbook_base_url == "https://reliable.example/console/alerts/"
    settings.write_text("console_url: https://reliable.example\nrunbook_base_url: https://wiki.example/rb/\n")
    assert load_config(settings).runbook_base_url == "https://wiki.example/rb/"  # an explicit base wins
    settings.write_text("console_url: reliable.example\n")
    with pytest.raises(PolicyError, match=r"alerts\.yaml:1: console_url must be an absolute http"):
        load_config(settings)
