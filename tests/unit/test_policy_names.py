"""A policy section naming an actor or queue the app does not declare (`reliable.policy.names`): the
rule itself, and a worker's boot (a WARNING naming it; a refused boot with strict_names=True).
`reliable policy check --app` makes it an error: tests/unit/test_policy_cli.py."""

from __future__ import annotations

import logging
from pathlib import Path

import dramatiq
import pytest

from reliable.errors import ActorContractError
from reliable.policy import Policy
from reliable.policy.names import undeclared_names
from reliable.store import StateStore

from middleware_harness import make_harness

POLICY = """\
actors:
  export_order:
    resumable: true
  export_orders:
    max_attempts: 4
queues:
  exprots:
    max_attempts: 2
"""


def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


def test_a_section_naming_no_declared_actor_or_queue_is_found_with_the_closest_name(tmp_path: Path) -> None:
    path = policy_file(tmp_path)
    names = undeclared_names(Policy.load(path), ["export_orders", "notify"], ["exports", "default"])
    assert [(n.kind, n.name, n.closest, n.path, n.line) for n in names] == [
        ("actors", "export_order", "export_orders", str(path), 2),
        ("queues", "exprots", "exports", str(path), 7),
    ]
    assert str(names[0]) == (f"{path}:2: actors.export_order: the app declares no actor 'export_order': did you "
                             "mean 'export_orders'? this section applies to nothing (fix the name, or remove the "
                             "section)")
    assert undeclared_names(Policy.load(path), ["export_order", "export_orders"], ["exprots"]) == []


def test_a_name_far_from_every_declared_one_offers_none(tmp_path: Path) -> None:
    [name] = undeclared_names(Policy.load(policy_file(tmp_path)), ["export_order", "export_orders"], ["zzz"])
    assert (name.name, name.closest) == ("exprots", None)
    assert "did you mean" not in name.message


def harness(tmp_path: Path, **install: object):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path / 'names.db'}"
    StateStore(url).upgrade()
    h = make_harness(url, policy_file(tmp_path), metrics=False, json_logs=False, **install)

    @dramatiq.actor(broker=h.broker, queue_name="exports")
    def export_orders() -> None:
        pass

    return h


def test_a_worker_boot_warns_naming_each_section_that_names_nothing(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    h = harness(tmp_path)
    try:
        with caplog.at_level(logging.WARNING):
            h.worker.start()
        warned = [r.getMessage() for r in caplog.records
                  if r.levelno == logging.WARNING and "policy:" in r.getMessage()]
        assert len(warned) == 2, caplog.text
        assert "actors.export_order: the app declares no actor 'export_order': did you mean 'export_orders'?" \
            in warned[0]
        assert "queues.exprots: the app declares no queue 'exprots': did you mean 'exports'?" in warned[1]
    finally:
        h.close()


def test_strict_names_refuses_the_boot(tmp_path: Path) -> None:
    h = harness(tmp_path, strict_names=True)
    try:
        with pytest.raises(ActorContractError) as info:
            h.worker.start()
        message = str(info.value)
        assert "\n" not in message
        assert "actors.export_order: the app declares no actor 'export_order': did you mean 'export_orders'?" \
            in message
        assert "strict_names=True" in message
        assert (h.worker.consumers, h.worker.workers) == ({}, [])  # nothing consumes
    finally:
        h.close()
