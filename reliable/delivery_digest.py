"""The delivery digest: what a job's message runs, reduced to one short hash.

A delivery may claim a job only when it carries what the job was registered with: the same actor,
arguments, keyword arguments and behaviour-choosing options (`options.DELIVERY_OPTIONS`). The
store computes the digest of the message it stores at registration; the worker computes it from
each delivery and its claim compares the two in the same statement (docs/concepts.md, "A delivery
must match its job"). The queue is not part of it: a routed retry waits on another queue.

Canonical form: the JSON text of ``[actor, args, kwargs, options]`` with sorted keys, compact
separators and ASCII escapes; its sha256, the first DIGEST_LENGTH hex digits. Both sides hash
values as JSON decodes them: the store decodes the text it stores, Dramatiq's JSON encoder decodes
what it delivers; values that did not come out of JSON (another Dramatiq encoder's) are passed
through JSON first (`decoded=False`), so a tuple and a list, or keys 1, 10 and "1", "10", hash
alike. `workflow_id` is left out at every level of a pipeline's `pipe_target`: registration adds
it to the later steps of a foreign message.

Pure: no I/O, imports nothing of ours but the option lists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from .options import DELIVERY_OPTIONS

__all__ = ["DIGEST_LENGTH", "delivery_digest", "differences", "message_digest"]

#: Hex digits kept of the sha256 (128 bits: no collision is found by chance or by search).
DIGEST_LENGTH = 32

_LINK = "workflow_id"
_DELIVERY = frozenset(DELIVERY_OPTIONS)
# One encoder, built once: json.dumps with arguments builds a new one per call (most of its cost).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
_PLAIN = json.JSONEncoder(default=str)


def delivery_digest(actor_name: Any, args: Any, kwargs: Any, options: Mapping[str, Any], *,
                    decoded: bool = True) -> str:
    """The digest of a delivery of `actor_name` with `args`, `kwargs` and message `options`.

    Options outside DELIVERY_OPTIONS, and options set to None, are left out. `decoded`: the values
    are as `json.loads` gives them (every mapping key a string); False passes them through JSON
    first (a few microseconds more). Raises TypeError or ValueError only for values JSON cannot
    hold (never for a message Dramatiq's JSON encoder carried).
    """
    return _hash([actor_name, args, kwargs, _chosen(options)], decoded=decoded)


def message_digest(message: Mapping[str, Any], *, decoded: bool = True) -> str:
    """The digest of a Dramatiq message as a dict (`Message.asdict()`, or a job's stored message)."""
    options = message.get("options")
    return delivery_digest(message.get("actor_name"), message.get("args"), message.get("kwargs"),
                           options if isinstance(options, Mapping) else {}, decoded=decoded)


def _chosen(options: Any) -> dict[str, Any]:
    """The options of DELIVERY_OPTIONS that are set, `workflow_id` taken out of `pipe_target`."""
    if not isinstance(options, Mapping):
        return {}
    # The options a message has (a few) looked up in the set, not every option name in the message:
    # the canonical form sorts the keys, so the order taken here makes no difference.
    chosen = {key: value for key, value in options.items() if value is not None and key in _DELIVERY}
    if "pipe_target" in chosen:
        chosen["pipe_target"] = _without_links(chosen["pipe_target"])
    return chosen


def _hash(value: Any, *, decoded: bool = True) -> str:
    # Keys that are not strings sort otherwise than JSON writes them (2 < 10, "10" < "2"), or not
    # at all (a mix of types): as JSON holds them, they are all strings.
    text = _CANONICAL.encode(value if decoded else json.loads(_PLAIN.encode(value)))
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:DIGEST_LENGTH]


def _without_links(step: Any) -> Any:
    """A pipeline step (a message dict) with `workflow_id` removed from its options, and from
    every step after it."""
    if not isinstance(step, Mapping):
        return step
    options = step.get("options")
    if not isinstance(options, Mapping) or (_LINK not in options and "pipe_target" not in options):
        return step
    kept = {key: value for key, value in options.items() if key != _LINK}
    if "pipe_target" in kept:
        kept["pipe_target"] = _without_links(kept["pipe_target"])
    return {**step, "options": kept}


def differences(registered: Mapping[str, Any], delivered: Mapping[str, Any]) -> list[str]:
    """Which parts of `delivered` differ from `registered` (both message dicts): "actor", "args",
    "kwargs" and "options.<name>" for each differing option of DELIVERY_OPTIONS. Names only: what
    a refused delivery's record may say without repeating any value."""
    def same(mine: Any, theirs: Any) -> bool:
        return _hash(mine, decoded=False) == _hash(theirs, decoded=False)

    found = ["actor" if part == "actor_name" else part for part in ("actor_name", "args", "kwargs")
             if not same(registered.get(part), delivered.get(part))]
    mine, theirs = (_chosen(message.get("options")) for message in (registered, delivered))
    found.extend(f"options.{key}" for key in DELIVERY_OPTIONS
                 if key in mine.keys() | theirs.keys() and not same(mine.get(key), theirs.get(key)))
    return found
