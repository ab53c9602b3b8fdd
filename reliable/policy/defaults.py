"""The built-in policy, as data: what `Policy.load(None)` uses.

`policies/builtin/default.yaml` says the same, with comments.

A policy file extends it (`layered`): its keys override the built-in ones and its rules are tried
first; `inherit: false` in a file drops the built-in policy. Only importable modules are named here
(builtins, http.client, httpx, dramatiq) so `reliable policy check` accepts a copy of it anywhere.
"""

from __future__ import annotations

from typing import Any

from ..yamlfile import Located, LocatedMap, LocatedSeq
from .source import Document

__all__ = ["AMBIGUOUS_RULE", "BUILTIN_PATH", "DEFAULT_POLICY", "builtin_document", "inherits", "layered"]

BUILTIN_PATH = "<built-in>"
# Line 0: the built-in policy has no file.
_NOWHERE = Located(BUILTIN_PATH, 0)

#: The built-in rule for errors after which a request may have reached the other side (read
#: timeouts, resets and disconnects after sending, an actor interrupted by its time limit): for a
#: job that is not idempotent the side effect may have happened, so it goes to REVIEW, never
#: retried. Connect errors and pool timeouts (nothing was sent) are not in it. Idempotent jobs skip
#: the rule and the transient rules below retry them.
AMBIGUOUS_RULE = "ambiguous-after-send"

#: Classification rules, first match wins. Contract and lease values are the dataclass defaults.
DEFAULT_POLICY: dict[str, Any] = {
    "version": 1,
    "rules": [
        {"name": "http-429", "status": 429, "class": "rate_limited"},
        {"name": "http-auth", "status": [401, 403], "class": "authorization"},
        {"name": "http-invalid", "status": [400, 422], "class": "invalid_input"},
        {"name": "http-4xx-retryable", "status": [408, 409, 425], "class": "transient"},
        {"name": "http-4xx", "status": "4xx", "class": "invalid_input"},
        {"name": "http-5xx", "status": "5xx", "class": "transient"},
        {"name": AMBIGUOUS_RULE, "idempotent": False, "class": "side_effect_unknown", "exception": [
            "httpx.ReadTimeout", "httpx.WriteTimeout", "httpx.ReadError", "httpx.WriteError",
            "httpx.RemoteProtocolError", "TimeoutError", "ConnectionResetError", "ConnectionAbortedError",
            "BrokenPipeError", "http.client.IncompleteRead", "dramatiq.middleware.time_limit.TimeLimitExceeded"]},
        {"name": "http-transport", "exception": "httpx.TransportError", "class": "transient"},
        {"name": "timeouts", "exception": ["TimeoutError", "dramatiq.middleware.time_limit.TimeLimitExceeded"],
         "class": "transient"},
        {"name": "connection", "exception": "ConnectionError", "class": "transient"},
        {"name": "permission", "exception": "PermissionError", "class": "authorization"},
        {"name": "bad-values", "exception": ["ValueError", "TypeError"], "class": "invalid_input"},
    ],
}


def _to_yaml(value: Any) -> Any:
    if isinstance(value, dict):
        return LocatedMap(_NOWHERE, {key: _to_yaml(item) for key, item in value.items()})
    if isinstance(value, list):
        return LocatedSeq(_NOWHERE, [_to_yaml(item) for item in value], [0] * len(value))
    return value


def builtin_document() -> Document:
    """The built-in policy as a document (line numbers 0: no file)."""
    root = _to_yaml(DEFAULT_POLICY)
    assert isinstance(root, LocatedMap)
    return Document(BUILTIN_PATH, root, builtin=True)


def inherits(documents: list[Document]) -> bool:
    """Whether a policy made of `documents` extends the built-in one (no document says `inherit: false`)."""
    return not any(doc.root.get("inherit") is False for doc in documents)


def layered(documents: list[Document]) -> list[Document]:
    """The documents a policy is built from: the built-in document, then `documents` on top of it.

    Without it when one of `documents` says `inherit: false` (the user's files are then the whole policy).
    """
    return [builtin_document(), *documents] if inherits(documents) else list(documents)
