"""Who may use the HTTP API and console: API tokens, roles, and the authenticated principal.

A token is `rel_<token_id>_<secret>`: the token id is public (it names the token in listings and
in the audit trail), the secret is 32 random bytes of which the store keeps only the sha256, so a
copy of the database hands out no working token. Tokens are created and revoked with the CLI
(`reliable tokens create NAME --role operator --queue billing`).

Roles (ROLES) are built in and map onto the operators policy that `Control` already enforces, so
no rule of what a command may do lives in the web layer:
- viewer: reads everything (arguments redacted, see `reliable.web.redaction`), runs no command;
- operator: runs every command on jobs of its queues and owners (globs; default: all);
- admin: runs every command on every job, sees arguments unredacted.

An authenticating proxy (SSO/OIDC) may name the user in a header instead; its roles then come
from an operators policy file (`reliable.operators`), exactly as for the CLI.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .inputs import MAX_NAME, check_length, check_reason_chars
from .operators import COMMANDS, Operator, OperatorsPolicy, Rule
from .store import StoreCore
from .store.api_tokens import insert_token, revoke_token, token_row, token_rows, touch_token
from .store.selection import Reader

__all__ = ["ROLES", "TOKEN_PREFIX", "ApiToken", "ApiTokens", "Principal", "reader_of", "role_policy"]

#: The built-in roles, least powerful first.
ROLES: tuple[str, ...] = ("viewer", "operator", "admin")

#: Every token starts with it (secret scanners can recognise a leaked one).
TOKEN_PREFIX = "rel_"

_TOUCH_EVERY = 60.0  # seconds between two writes of a token's last_used_at


def role_policy(name: str, role: str, *, queues: Sequence[str] = ("*",), owners: Sequence[str] = ("*",)
                ) -> OperatorsPolicy:
    """The operators policy that grants `name` exactly what `role` (scoped to queues/owners) allows."""
    if role not in ROLES:
        raise ConfigError(f"unknown role {role!r} (known: {', '.join(ROLES)})")
    rules: tuple[Rule, ...] = ()
    if role == "admin":
        rules = (Rule(tuple(sorted(COMMANDS)), ("*",), ("*",)),)
    elif role == "operator":
        rules = (Rule(tuple(sorted(COMMANDS)), tuple(queues) or ("*",), tuple(owners) or ("*",)),)
    return OperatorsPolicy(operators=((name, (role,)),), roles={role: rules}, path=f"<{role} token>")


def reader_of(operators: OperatorsPolicy, name: str) -> Reader:
    """What `name` may select under `operators` (`reliable.store.selection.Reader`): it may search
    arguments only when it may act on every job (it sees every job's arguments); its scope is the jobs
    it may run some command on (the jobs whose arguments it sees)."""
    if operators.allows_everywhere(name):
        return Reader(name, True)

    def acts_on(queue: str, owner: str | None) -> bool:
        return any(operators.allows(name, command, queue, owner) for command in COMMANDS)

    return Reader(name, False, acts_on)


@dataclass(frozen=True)
class Principal:
    """An authenticated caller of the API: the identity actions are audited under, and what it may do.

    `source`: token, session (a browser signed in with a token) or proxy (an authenticating proxy's
    header). `operators` is the policy `Control` enforces for it.
    """

    name: str
    role: str
    source: str
    operators: OperatorsPolicy
    token_id: str | None = None
    queues: tuple[str, ...] = ("*",)
    owners: tuple[str, ...] = ("*",)

    @property
    def may_act(self) -> bool:
        """Whether any command is allowed at all (False: read-only)."""
        return self.operators.may_act(self.name)

    @property
    def unrestricted(self) -> bool:
        """Whether every command is allowed on every job (an admin): it sees every job's arguments,
        may search them, and may confirm or cancel anybody's bulk operation."""
        return self.operators.allows_everywhere(self.name)

    @property
    def reader(self) -> Reader:
        """What it may select: search arguments only when unrestricted; act on its scope only (`reader_of`)."""
        return reader_of(self.operators, self.name)

    def sees_secrets_of(self, queue: str, owner: str | None) -> bool:
        """Whether a job's arguments, checkpoint and errors are shown unmasked: only to a caller that
        may act on that job (a read-only caller, or an operator outside its scope, sees them masked)."""
        return self.reader.covers(queue, owner)

    def allows(self, command: str, queue: str, owner: str | None) -> bool:
        """Whether `command` on a job of `queue` owned by `owner` is allowed (for buttons; Control decides)."""
        return self.operators.allows(self.name, command, queue, owner)

    def operator(self, host: str) -> Operator:
        """The identity `Control` records on events: the authenticated name, never a free-text one."""
        return Operator(self.name, host, f"api:{self.source}")

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (no secret)."""
        return {"name": self.name, "role": self.role, "source": self.source, "token_id": self.token_id,
                "queues": list(self.queues), "owners": list(self.owners), "may_act": self.may_act,
                "unrestricted": self.unrestricted}


@dataclass(frozen=True)
class ApiToken:
    """A stored token (never its secret)."""

    token_id: str
    name: str
    role: str
    queues: tuple[str, ...]
    owners: tuple[str, ...]
    created_at: float
    created_by: str | None = None
    expires_at: float | None = None
    revoked_at: float | None = None
    revoked_by: str | None = None
    last_used_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def active(self, now: float) -> bool:
        """Neither revoked nor expired at `now`."""
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def principal(self, source: str = "token") -> Principal:
        """The principal this token authenticates."""
        return Principal(self.name, self.role, source, role_policy(self.name, self.role, queues=self.queues,
                                                                   owners=self.owners),
                         token_id=self.token_id, queues=self.queues, owners=self.owners)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (no secret)."""
        return {"token_id": self.token_id, "name": self.name, "role": self.role, "queues": list(self.queues),
                "owners": list(self.owners), "created_at": self.created_at, "created_by": self.created_by,
                "expires_at": self.expires_at, "revoked_at": self.revoked_at, "revoked_by": self.revoked_by,
                "last_used_at": self.last_used_at}

    @classmethod
    def from_row(cls, row: Any) -> ApiToken:
        """From a `reliable_api_tokens` row."""
        return cls(row.token_id, row.name, row.role, tuple(json.loads(row.queues)), tuple(json.loads(row.owners)),
                   row.created_at, row.created_by, row.expires_at, row.revoked_at, row.revoked_by, row.last_used_at)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_token(presented: str) -> tuple[str, str] | None:
    """(token_id, secret) of a well-formed token, else None."""
    if not presented.startswith(TOKEN_PREFIX):
        return None
    token_id, sep, secret = presented[len(TOKEN_PREFIX):].partition("_")
    if not sep or not token_id or not secret or len(token_id) > 32:
        return None
    return token_id, secret


class ApiTokens:
    """The API tokens kept in a StateStore."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    def create(self, name: str, role: str, *, queues: Sequence[str] = (), owners: Sequence[str] = (),
               created_by: str | None = None, expires_in: float | None = None) -> tuple[ApiToken, str]:
        """A new token for `name`; returns it and its plain text (shown once, never stored)."""
        if not name.strip():
            raise ConfigError("a token needs a name: the identity its actions are audited under")
        check_length("name", name, limit=MAX_NAME)
        role_policy(name, role)  # validates the role
        if role != "operator" and (queues or owners):
            raise ConfigError(f"--queue/--owner scope an operator token; a {role} token has no scope")
        if expires_in is not None and expires_in <= 0:
            raise ConfigError("expires_in must be positive")
        self.store.check_schema()
        if any(token.name == name for token in self.list()):
            raise ConfigError(f"an active API token named {name!r} exists: every action is audited under the "
                              "token's name, so two tokens may not share one (revoke the old one first)")
        token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
        now = self.store.now()
        row = {"token_id": token_id, "name": name, "secret_hash": _hash(secret), "role": role,
               "queues": json.dumps(list(queues) or ["*"]), "owners": json.dumps(list(owners) or ["*"]),
               "created_at": now, "created_by": created_by,
               "expires_at": None if expires_in is None else now + expires_in}
        insert_token(self.store, row)
        return self.get(token_id), f"{TOKEN_PREFIX}{token_id}_{secret}"

    def get(self, token_id: str) -> ApiToken:
        """The token with this id; ConfigError if there is none."""
        row = token_row(self.store, token_id)
        if row is None:
            raise ConfigError(f"no API token {token_id!r}")
        return ApiToken.from_row(row)

    def list(self, *, include_inactive: bool = False) -> list[ApiToken]:
        """Every token, newest first (only active ones unless `include_inactive`)."""
        self.store.check_schema()
        rows = token_rows(self.store)
        now = self.store.now()
        tokens = [ApiToken.from_row(r) for r in rows]
        return tokens if include_inactive else [t for t in tokens if t.active(now)]

    def revoke(self, token_id: str, *, by: str | None = None, reason: str | None = None) -> ApiToken:
        """Revoke a token at once (kept for the audit trail); ConfigError if unknown or revoked already.

        `by` (who) and `reason` (why) are kept whole as the record's `revoked_by`, "by: reason" (a
        VARCHAR(255)), or refused before anything is written: TextTooLong when `by` is longer than
        `inputs.MAX_NAME` or the reason longer than what the record leaves it, InvalidReason when it
        holds control characters. Never cut.
        """
        check_length("operator", by, limit=MAX_NAME, where="tokens revoke")
        record = by
        if reason is not None:
            check_reason_chars("tokens revoke", reason)
            record = f"{by}: {reason}" if by else reason
            room = MAX_NAME - (len(record) - len(reason))  # what "by: " leaves of the record's column
            check_length("reason", reason, limit=room,
                         where=f"tokens revoke (kept as 'operator: reason' in {MAX_NAME} characters)")
        token = self.get(token_id)
        if token.revoked_at is not None:
            raise ConfigError(f"API token {token_id} ({token.name}) was revoked already")
        revoke_token(self.store, token_id, by=record)
        return self.get(token_id)

    def authenticate(self, presented: str) -> ApiToken | None:
        """The active token `presented` is, or None (unknown, wrong secret, revoked or expired)."""
        parts = split_token(presented.strip())
        if parts is None:
            return None
        token_id, secret = parts
        row = token_row(self.store, token_id)
        if row is None or not hmac.compare_digest(row.secret_hash, _hash(secret)):
            return None
        token = ApiToken.from_row(row)
        now = self.store.now()
        if not token.active(now):
            return None
        if token.last_used_at is None or now - token.last_used_at > _TOUCH_EVERY:
            touch_token(self.store, token_id, now)
        return token
