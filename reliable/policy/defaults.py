"""The built-in policy, as data: what `Policy.load(None)` uses. `policies/default.yaml` says the same, with comments.

Only importable modules are named here (builtins, httpx, dramatiq) so `reliable policy check` accepts it.
"""

from __future__ import annotations

from typing import Any

from .source import Document, YList, YMap

__all__ = ["BUILTIN_PATH", "DEFAULT_POLICY", "builtin_document"]

BUILTIN_PATH = "<built-in>"

#: Classification rules, first match wins. Contract and lease values are the dataclass defaults.
DEFAULT_POLICY: dict[str, Any] = {
    "version": 1,
    "rules": [
        {"name": "http-429", "status": 429, "class": "rate_limited"},
        {"name": "http-auth", "status": [401, 403], "class": "authorization"},
        {"name": "http-invalid", "status": [400, 422], "class": "invalid_input"},
        {"name": "http-5xx", "status": "5xx", "class": "transient"},
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
        out = YMap()
        out.line, out.key_lines = 0, {}
        for key, item in value.items():
            out[key] = _to_yaml(item)
        return out
    if isinstance(value, list):
        seq = YList(_to_yaml(item) for item in value)
        seq.line, seq.item_lines = 0, [0] * len(seq)
        return seq
    return value


def builtin_document() -> Document:
    """The built-in policy as a document (line numbers 0: no file)."""
    root = _to_yaml(DEFAULT_POLICY)
    assert isinstance(root, YMap)
    return Document(BUILTIN_PATH, root)
