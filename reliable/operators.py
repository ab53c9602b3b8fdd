"""Operator identity and the operators policy (who may run which command on which queue).

The operators policy is a YAML file::

    operators:                 # identity (glob) -> roles
      alice: [admin]
      "oncall-*": [operator]
      "*": [viewer]            # anyone not matched above
    roles:                     # role -> rules; a rule allows `commands` on `queues` (globs)
      admin:
        - {commands: ["*"], queues: ["*"]}
      operator:
        - {commands: [pause, resume, stop, requeue], queues: ["exports", "billing-*"]}
        - {commands: ["*"], owners: ["team-data"]}   # any queue, jobs owned by team-data
      viewer: []               # may read (the CLI's list/show), may change nothing

A rule may also name `owners` (globs of the job's owner, default any): it then covers a job only
when both its queue and its owner match (a job without an owner matches only "*").
Commands are the names in COMMANDS (`retry` is accepted as a synonym of `requeue`, `resolve`
of `reconcile`). Identities are matched against the operator's name (e.g. the OS user); the first
matching pattern in file order wins (exact names before globs is a good habit).

Without an operators file every command is allowed for everyone (`OperatorsPolicy.allow_all()`).
This is a guard-rail and an audit trail, not a security boundary: whoever holds the database
credentials can write to the store directly (see docs/control.md).
"""

from __future__ import annotations

import fnmatch
import getpass
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import NotAuthorized, PolicyError
from .inputs import MAX_NAME, check_length
from .yamlfile import compose, read_text

__all__ = ["COMMANDS", "COMMAND_ORDER", "ENV_OPERATOR", "SYNONYMS", "Operator", "OperatorsPolicy", "Rule"]

#: Every operator command the policy can allow.
#: Every operator command, in the order a console lists them.
COMMAND_ORDER: tuple[str, ...] = ("pause", "stop", "cancel", "resume", "restart", "requeue", "reconcile", "discard")
COMMANDS: frozenset[str] = frozenset(COMMAND_ORDER)
#: Other names of commands: `retry` is requeue, `resolve` is reconcile, `purge` is discard (what Sidekiq
#: and Oban call clearing dead jobs: here they leave the dead letters, counted, confirmed and audited,
#: and their rows go with retention, `reliable db prune`; docs/console.md, "Dead letters").
SYNONYMS: Mapping[str, str] = {"retry": "requeue", "resolve": "reconcile", "purge": "discard"}

#: Environment variable naming the operator when --operator is not given.
ENV_OPERATOR = "RELIABLE_OPERATOR"


@dataclass(frozen=True)
class Operator:
    """Who runs a command, from where, and how we know (`source`: option, env, os, or a front end's own)."""

    name: str
    host: str
    source: str

    @classmethod
    def resolve(cls, name: str | None = None, *, environ: Mapping[str, str] | None = None,
                host: str | None = None) -> Operator:
        """The identity of the person at this terminal: `name`, else $RELIABLE_OPERATOR, else the OS user."""
        env = os.environ if environ is None else environ
        hostname = host or socket.gethostname()
        if name:
            check_length("operator", name, limit=MAX_NAME)
            return cls(name, hostname, "option")
        if env.get(ENV_OPERATOR):
            check_length(ENV_OPERATOR, env[ENV_OPERATOR], limit=MAX_NAME)
            return cls(env[ENV_OPERATOR], hostname, "env")
        try:
            user = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry (containers) and no LOGNAME/USER
            user = f"uid-{os.getuid()}"
        return cls(user, hostname, "os")


@dataclass(frozen=True)
class Rule:
    """One grant of a role: these commands on jobs of these queues and owners (glob patterns)."""

    commands: tuple[str, ...]
    queues: tuple[str, ...]
    owners: tuple[str, ...] = ("*",)

    def allows(self, command: str, queue: str, owner: str | None = None) -> bool:
        """Whether this rule covers `command` on a job of `queue` owned by `owner`."""
        return (any(fnmatch.fnmatchcase(command, p) for p in self.commands)
                and any(fnmatch.fnmatchcase(queue, p) for p in self.queues)
                and any(p == "*" or (owner is not None and fnmatch.fnmatchcase(owner, p)) for p in self.owners))


@dataclass(frozen=True)
class OperatorsPolicy:
    """Identities -> roles -> allowed commands per queue. `None` rules mean: allow everything."""

    operators: tuple[tuple[str, tuple[str, ...]], ...] = ()
    roles: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
    path: str | None = None
    allow_everything: bool = False

    @classmethod
    def allow_all(cls) -> OperatorsPolicy:
        """The policy used when no operators file is configured: every command is allowed."""
        return cls(allow_everything=True)

    def roles_of(self, operator: str) -> tuple[str, ...]:
        """The roles of the first identity pattern that matches `operator` (none if no pattern does)."""
        for pattern, roles in self.operators:
            if fnmatch.fnmatchcase(operator, pattern):
                return roles
        return ()

    def allows(self, operator: str, command: str, queue: str, owner: str | None = None) -> bool:
        """Whether `operator` may run `command` on a job of `queue` owned by `owner`."""
        if self.allow_everything:
            return True
        command = SYNONYMS.get(command, command)
        return any(rule.allows(command, queue, owner) for role in self.roles_of(operator)
                   for rule in self.roles.get(role, ()))

    def allows_everywhere(self, operator: str) -> bool:
        """Whether `operator` may run every command on every job (whatever its roles are called)."""
        if self.allow_everything:
            return True
        rules = [rule for role in self.roles_of(operator) for rule in self.roles.get(role, ())]
        return all(any("*" in rule.queues and "*" in rule.owners and any(fnmatch.fnmatchcase(command, p)
                                                                          for p in rule.commands)
                       for rule in rules) for command in COMMANDS)

    def may_act(self, operator: str) -> bool:
        """Whether `operator` may run any command at all (False: a read-only identity)."""
        return self.allow_everything or any(self.roles.get(role) for role in self.roles_of(operator))

    def check(self, operator: str, command: str, queue: str, owner: str | None = None) -> None:
        """Raise NotAuthorized (saying who, what, where and which file) unless allowed."""
        if self.allows(operator, command, queue, owner):
            return
        roles = self.roles_of(operator)
        who = f"roles {', '.join(roles)}" if roles else "no role"
        whose = f" owned by {owner!r}" if owner else ""
        raise NotAuthorized(
            f"operator {operator!r} ({who}) may not {command} jobs on queue {queue!r}{whose} "
            f"(operators policy {self.path or '<in memory>'})"
        )

    # -- loading ---------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OperatorsPolicy:
        """Read and validate an operators file; PolicyError names file, line and field on any mistake."""
        return cls.parse(read_text(path, "operators policy"), path=str(path))

    @classmethod
    def parse(cls, text: str, *, path: str = "<operators>") -> OperatorsPolicy:
        """Validate operators-policy YAML given as text (see the module docstring for the format)."""
        root = compose(text, path)
        if root is None:
            raise PolicyError("the operators policy is empty", path=path, line=1)
        top = _mapping(root, path, "<top level>")
        for key in sorted(set(top) - {"operators", "roles"})[:1]:
            raise PolicyError(f"unknown key {key!r} (expected operators, roles)", path=path,
                              line=_line(top[key][0]), field=key)
        for required in ("operators", "roles"):
            if required not in top:
                raise PolicyError(f"missing {required!r}", path=path, line=_line(root), field=required)
        roles: dict[str, tuple[Rule, ...]] = {}
        roles_node = top["roles"][1]
        for role, (_key_node, value) in _mapping(roles_node, path, "roles").items():
            where = f"roles.{role}"
            if isinstance(value, ScalarNode) and value.value in ("", "~", "null"):
                roles[role] = ()
                continue
            rules = []
            for index, item in enumerate(_sequence(value, path, where)):
                rules.append(_rule(item, path, f"{where}[{index}]"))
            roles[role] = tuple(rules)
        operators: list[tuple[str, tuple[str, ...]]] = []
        for ident, (_key, value) in _mapping(top["operators"][1], path, "operators").items():
            where = f"operators.{ident}"
            role_nodes = [value] if isinstance(value, ScalarNode) else _sequence(value, path, where)
            names = []
            for node in role_nodes:
                role = _scalar(node, path, where)
                if role not in roles:
                    raise PolicyError(f"unknown role {role!r} (defined: {', '.join(sorted(roles)) or 'none'})",
                                      path=path, line=_line(node), field=where)
                names.append(role)
            operators.append((ident, tuple(names)))
        return cls(operators=tuple(operators), roles=roles, path=path)


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _mapping(node: Node, path: str, where: str) -> dict[str, tuple[Node, Node]]:
    if not isinstance(node, MappingNode):
        raise PolicyError("expected a mapping", path=path, line=_line(node), field=where)
    result: dict[str, tuple[Node, Node]] = {}
    for key, value in node.value:
        name = _scalar(key, path, where)
        if name in result:
            raise PolicyError(f"duplicate key {name!r}", path=path, line=_line(key), field=f"{where}.{name}")
        result[name] = (key, value)
    return result


def _sequence(node: Node, path: str, where: str) -> Sequence[Node]:
    if not isinstance(node, SequenceNode):
        raise PolicyError("expected a list", path=path, line=_line(node), field=where)
    return list(node.value)


def _scalar(node: Node, path: str, where: str) -> str:
    if not isinstance(node, ScalarNode) or not str(node.value).strip():
        raise PolicyError("expected a non-empty string", path=path, line=_line(node), field=where)
    return str(node.value)


def _strings(node: Node, path: str, where: str) -> tuple[str, ...]:
    nodes = [node] if isinstance(node, ScalarNode) else _sequence(node, path, where)
    return tuple(_scalar(n, path, where) for n in nodes)


def _rule(node: Node, path: str, where: str) -> Rule:
    fields = _mapping(node, path, where)
    for key in sorted(set(fields) - {"commands", "queues", "owners"})[:1]:
        raise PolicyError(f"unknown key {key!r} (expected commands, queues, owners)", path=path,
                          line=_line(fields[key][0]), field=f"{where}.{key}")
    if "commands" not in fields:
        raise PolicyError("missing 'commands'", path=path, line=_line(node), field=f"{where}.commands")
    commands = []
    value = fields["commands"][1]
    for item in [value] if isinstance(value, ScalarNode) else _sequence(value, path, f"{where}.commands"):
        command = _scalar(item, path, f"{where}.commands")
        command = SYNONYMS.get(command, command)
        if command not in COMMANDS and not any(ch in command for ch in "*?["):
            raise PolicyError(f"unknown command {command!r} (known: {', '.join(sorted(COMMANDS))})",
                              path=path, line=_line(item), field=f"{where}.commands")
        commands.append(command)
    queues = _strings(fields["queues"][1], path, f"{where}.queues") if "queues" in fields else ("*",)
    owners = _strings(fields["owners"][1], path, f"{where}.owners") if "owners" in fields else ("*",)
    return Rule(tuple(commands), queues, owners)
