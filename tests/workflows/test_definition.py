"""Declaring workflows: validation with errors that name the node and field, digests, and Dramatiq's
pipeline and group mapped onto workflows. Pure: no broker runs anything here."""

from __future__ import annotations

from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from reliable.workflows import Workflow, WorkflowDefinitionError, node, workflow
from reliable.workflows.definition import descendants, input_digest, topological


@pytest.fixture
def actors() -> Any:
    broker = StubBroker()
    dramatiq.set_broker(broker)

    @dramatiq.actor(broker=broker)
    def fetch(url: str) -> str:
        return url

    @dramatiq.actor(broker=broker)
    def parse(text: str) -> int:
        return len(text)

    yield fetch, parse
    broker.close()


def test_a_node_takes_an_actor_or_a_message(actors: Any) -> None:
    fetch, parse = actors
    from_message = node("f", fetch.message_with_options(args=("http://x",), max_retries=2))
    assert (from_message.actor, from_message.queue, from_message.args) == ("fetch", "default", ("http://x",))
    assert from_message.options == {"max_retries": 2}
    from_actor = node("p", parse, after=["f"], pass_results=True)
    assert from_actor.args == () and from_actor.after == ("f",) and from_actor.pass_results
    with pytest.raises(WorkflowDefinitionError, match="node 'x': expected a Dramatiq actor or message"):
        node("x", print)


def test_links_between_messages_are_not_carried_over(actors: Any) -> None:
    fetch, _ = actors
    message = fetch.message_with_options(args=("u",), pipe_target={"x": 1}, on_success="cb", workflow_id="forged")
    assert node("f", message).options == {}


@pytest.mark.parametrize(("nodes", "error"), [
    ([], "has no nodes"),
    ([("a", ()), ("a", ())], "node 'a': declared twice"),
    ([("a", ("ghost",))], "node 'a': after= names unknown node\\(s\\) 'ghost'"),
    ([("a", ("b",)), ("b", ("c",)), ("c", ("a",))], "cycle: a -> b -> c -> a"),
    ([("a", ("a",))], "cycle: a -> a"),
    ([("", ())], "node name must be 1 to 255 characters"),
])
def test_invalid_graphs_are_refused_with_the_node_named(actors: Any, nodes: list[tuple[str, tuple[str, ...]]],
                                                        error: str) -> None:
    fetch, _ = actors
    with pytest.raises(WorkflowDefinitionError, match=error):
        workflow("w", [node(name, fetch.message("u"), after=after) for name, after in nodes])


@pytest.mark.parametrize(("options", "error"), [
    ({"trigger": "any"}, "node 'b': trigger must be one of all_succeeded, all_done, got 'any'"),
    ({"on_upstream_failure": "ignore"}, "node 'b': on_upstream_failure must be one of fail, skip"),
    ({"after": ["a", "a"]}, "node 'b': a parent is listed twice"),
])
def test_invalid_node_options_name_the_field(actors: Any, options: dict[str, Any], error: str) -> None:
    fetch, _ = actors
    with pytest.raises(WorkflowDefinitionError, match=error):
        workflow("w", [node("a", fetch.message("u")), node("b", fetch.message("u"), **{"after": ["a"], **options})])


def test_pass_results_needs_parents_and_arguments_must_be_json(actors: Any) -> None:
    fetch, _ = actors
    with pytest.raises(WorkflowDefinitionError, match="node 'a': pass_results needs parents"):
        workflow("w", [node("a", fetch.message("u"), pass_results=True)])
    with pytest.raises(WorkflowDefinitionError, match="node 'a': arguments and options must be JSON"):
        workflow("w", [node("a", fetch.message(object()))])


def test_the_digest_changes_with_inputs_and_code_version_only(actors: Any) -> None:
    fetch, _ = actors
    base = node("a", fetch.message("u"))
    assert input_digest(base, None) == input_digest(node("renamed", fetch.message("u"), after=()), None)
    assert input_digest(base, None) != input_digest(node("a", fetch.message("v")), None)
    assert input_digest(base, None) != input_digest(base, "2")
    reordered = node("k", fetch.message(y=2, x=1))
    assert input_digest(node("k", fetch.message(x=1, y=2)), "1") == input_digest(reordered, "1")


def test_a_pipeline_maps_onto_a_chain_that_passes_results(actors: Any) -> None:
    fetch, parse = actors
    wf = Workflow.from_pipeline("p", dramatiq.pipeline([fetch.message("u"), parse.message(),
                                                        parse.message_with_options(args=("x",), pipe_ignore=True)]))
    assert [(n.name, n.after, n.pass_results) for n in wf.nodes] == [
        ("step1", (), False), ("step2", ("step1",), True), ("step3", ("step2",), False)]
    assert all("pipe_target" not in n.options for n in wf.nodes)


def test_a_group_maps_onto_parallel_members_with_its_callbacks_after_all(actors: Any) -> None:
    fetch, parse = actors
    g = dramatiq.group([fetch.message("a"), dramatiq.pipeline([fetch.message("b"), parse.message()])])
    g.add_completion_callback(parse.message("done"))
    wf = Workflow.from_group("g", g)
    assert [(n.name, n.after) for n in wf.nodes] == [
        ("member1", ()), ("member2.step1", ()), ("member2.step2", ("member2.step1",)),
        ("callback1", ("member1", "member2.step2"))]
    assert wf["callback1"].args == ("done",) and wf["member2.step2"].pass_results


def test_topological_order_and_descendants() -> None:
    parents = {"d": ("b", "c"), "a": (), "b": ("a",), "c": ("a",), "e": ()}
    order = topological(parents)
    assert all(order.index(p) < order.index(n) for n, ps in parents.items() for p in ps)
    assert descendants({"a": ["b", "c"], "b": ["d"], "c": ["d"]}, ["b"]) == {"b", "d"}
