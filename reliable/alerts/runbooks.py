"""Runbooks and annotations: Jinja2 Markdown rendered in a sandbox, with job values as data only.

Templates come from the runbook directory and the rule files (trusted configuration). Everything
read from jobs (error messages, checkpoints, ids) enters only as context values: disclosed to the
renderer's audience (anonymous by default: secrets masked), autoescaped for HTML, truncated, and
never compiled as a template. Link URLs are built by plain placeholder
substitution with percent-encoding (no str.format: it would allow attribute access).
"""

from __future__ import annotations

import copy
import functools
import logging
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import jinja2
from jinja2.sandbox import SandboxedEnvironment
from markupsafe import Markup

from ..disclosure import Audience, Kind, disclose, disclose_json_text
from ..errors import ConfigError, PolicyError
from ..inputs import shorten
from ..isotime import format_time
from ..store.alert_queries import JobContext
from .model import Candidate
from .rules import AlertRule
from .samples import sample_alerts, sample_job

__all__ = [
    "DEFAULT_RUNBOOK_BASE_URL",
    "LINK_FIELDS",
    "RUNBOOK_LABELS",
    "RunbookRenderer",
    "check_link_template",
    "check_runbook_base_url",
    "next_actions",
    "runbook_url",
    "runbook_url_template",
    "safe_command",
    "safe_url",
]

logger = logging.getLogger(__name__)

LINK_FIELDS = frozenset({"job_id", "trace_id", "attempt_id", "queue", "actor"})
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
TEXT_LIMIT = 300
# The defaults of a rule without its own summary or description: every label they name is read with
# .get (StrictUndefined refuses even `if labels.job_id` when the alert has no such label), so they
# render for every grouping: per job, per (queue, actor), per queue, per actor, per schedule.
DEFAULT_SUMMARY = "{{ labels.alertname }}{% if labels.get('queue') %} on queue {{ labels.queue }}{% endif %}" \
                  "{% if labels.get('actor') %} (actor {{ labels.actor }}){% endif %}" \
                  "{% if labels.get('schedule') %} (schedule {{ labels.schedule }}){% endif %}" \
                  "{% if labels.get('job_id') %}: job {{ labels.job_id }} in {{ labels.get('state') }}{% endif %}"
DEFAULT_DESCRIPTION = "{{ alert.name }} holds with value {{ value | round(3) }}" \
                      "{% if labels.get('queue') %} on queue {{ labels.queue }}{% endif %}" \
                      "{% if labels.get('actor') %} for actor {{ labels.actor }}{% endif %} (owner {{ alert.owner }})."
#: Where `reliable exporter` serves the rendered runbooks (its default port): a real URL out of the box.
DEFAULT_RUNBOOK_BASE_URL = "http://127.0.0.1:9464/runbooks/"


def cut(text: Any, limit: int = TEXT_LIMIT) -> str | None:
    """`text` as a string of at most `limit` characters (an ellipsis marks the cut), or None."""
    return None if text is None else shorten(text, limit)


def check_link_template(name: str, template: str) -> None:
    """Raise ConfigError unless `template` is an http(s) URL using only the known placeholders."""
    if not template.startswith(("https://", "http://")):
        raise ConfigError(f"links.{name}: expected an http(s) URL template, got {template!r}")
    for field in re.findall(r"\{([^}]*)\}", template):
        if field not in LINK_FIELDS:
            allowed = ", ".join(sorted(LINK_FIELDS))
            raise ConfigError(f"links.{name}: unknown placeholder {{{field}}} (allowed: {allowed})")


def check_runbook_base_url(base: str) -> str:
    """`base` if it is an absolute http(s) URL ending in /, # or =; ConfigError otherwise.

    The alert name is appended as is, so the base must end where a name can start: a bare slug
    or a relative link would not open from a notification.
    """
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"runbook_base_url must be an absolute http(s) URL, got {base!r}")
    if not base.endswith(("/", "#", "=")):
        raise ConfigError(f"runbook_base_url must end with /, # or = (the alert name is appended), got {base!r}")
    return base


#: The labels an alert's `runbook_url` carries as its query string, so that the page it opens shows that
#: alert's jobs (`reliable.alerts.pages` picks the firing alert whose labels match), in this order.
RUNBOOK_LABELS: tuple[str, ...] = ("queue", "actor", "schedule", "job_id")


def runbook_url(base: str, alertname: str, labels: Mapping[str, str] | None = None) -> str:
    """The runbook link of an alert: the base URL plus the lower-cased alert name, and the alert's
    `RUNBOOK_LABELS` as a query string (none after a base ending in "#": a fragment has no query)."""
    url = f"{base}{alertname.lower()}"
    query = [(key, labels[key]) for key in RUNBOOK_LABELS if labels and labels.get(key)]
    if not query or base.endswith("#"):
        return url
    return f"{url}{'&' if '?' in base else '?'}{urlencode(query)}"


def runbook_url_template(base: str, alertname: str) -> str:
    """`runbook_url` for a rule Prometheus evaluates: the same link, its query string a Go template
    that Prometheus fills with the firing alert's `RUNBOOK_LABELS` (those it has, percent-encoded)."""
    url = f"{base}{alertname.lower()}"
    if base.endswith("#"):
        return url
    first = "&" if "?" in base else "?"
    pairs = "".join(f"{{{{ with $labels.{key} }}}}{{{{ $sep }}}}{key}={{{{ . | urlquery }}}}{{{{ $sep = \"&\" }}}}"
                    f"{{{{ end }}}}" for key in RUNBOOK_LABELS)
    return f'{url}{{{{ $sep := "{first}" }}}}{pairs}'


def safe_url(template: str, values: Mapping[str, str | None]) -> str:
    """Fill `{field}` placeholders with percent-encoded values (empty when missing)."""
    return _PLACEHOLDER.sub(lambda m: quote(values.get(m.group(1)) or "", safe=""), template)


#: The one safe command that moves a job on from each status (the console's button, the CLI line):
#: command -> the CLI that runs it. A status not listed has none (inspect it).
SAFE_COMMANDS: dict[str, str] = {"RUNNING": "stop", "PAUSED": "resume", "STOPPED": "resume", "DEAD": "requeue"}
_CLI = {"stop": "reliable stop", "resume": "reliable resume", "requeue": "reliable dlq requeue"}


def safe_command(status: str, job_id: str, alertname: str) -> tuple[str, str] | None:
    """The safe command for a job in `status` (a `Control` method's name) and its exact CLI line, or None."""
    command = SAFE_COMMANDS.get(status)
    if command is None:
        return None
    return command, f"{_CLI[command]} {shlex.quote(job_id)} --reason {shlex.quote(f'alert:{alertname}')}"


def next_actions(status: str, job_id: str, alertname: str) -> list[str]:
    """The safe next `reliable` commands for a job in `status`, inspection first, the safe command
    (`safe_command`) last; shell-quoted."""
    jid = shlex.quote(job_id)
    show, events = f"reliable jobs show {jid}", f"reliable jobs events {jid}"
    inspect = {
        "RUNNING": [show, events], "STOPPING": [events, show], "PAUSED": [show], "STOPPED": [show],
        "DEAD": [f"reliable dlq show {jid}"], "REVIEW": [f"reliable review show {jid}", events],
    }.get(status, [show, events])
    safe = safe_command(status, job_id, alertname)
    return inspect + ([safe[1]] if safe else [])


def _iso(epoch: float | None) -> str | None:
    return format_time(epoch)


def job_view(ctx: JobContext, alertname: str, links: Mapping[str, str], audience: Audience) -> dict[str, Any]:
    """What a template sees of one affected job (plain data; strings truncated; the error message and
    checkpoint disclosed to `audience`, `reliable.disclosure`)."""
    job = ctx.job
    attempt_id = ctx.attempts[0].attempt_id if ctx.attempts else job.attempt_id
    values = {"job_id": job.job_id, "trace_id": job.trace_id, "attempt_id": attempt_id, "queue": job.queue,
              "actor": job.actor}
    return {
        "job_id": cut(job.job_id, 80), "queue": cut(job.queue, 80), "actor": cut(job.actor, 80),
        "status": job.status, "owner": cut(job.owner, 80) or "unowned", "attempt": job.attempt,
        "attempt_ids": [a.attempt_id for a in ctx.attempts] or ([job.attempt_id] if job.attempt_id else []),
        "attempts": [{"attempt_id": a.attempt_id, "attempt": a.attempt, "outcome": a.outcome,
                      "error_class": a.error_class, "worker_id": cut(a.worker_id, 80), "started_at": _iso(a.started_at)}
                     for a in ctx.attempts],
        "last_error_class": cut(job.last_error_class, 80),
        "last_error_message": cut(disclose(job.last_error_message, Kind.ERROR_TEXT, audience)),
        "checkpoint": cut(disclose_json_text(job.checkpoint, Kind.CHECKPOINT, audience), 200),
        "checkpoint_at": _iso(job.checkpoint_at),
        "trace_id": cut(job.trace_id, 80),
        # Built from trusted templates with percent-encoded values: no character needs escaping.
        "links": {name: Markup(safe_url(tpl, values)) for name, tpl in sorted(links.items())},
        "actions": next_actions(job.status, job.job_id, alertname),
    }


class RunbookRenderer:
    """Renders runbooks (files in `directory`) and rule annotations for alerts, in a Jinja2 sandbox.

    `audience`: who reads what it renders; by default anonymous (an exporter's page, an alert's
    notification): the jobs' error messages and checkpoints are masked (`reliable.disclosure`).
    """

    def __init__(self, directory: Path | str, *, links: Mapping[str, str] | None = None,
                 base_url: str = DEFAULT_RUNBOOK_BASE_URL, max_chars: int = 8000,
                 audience: Audience | None = None) -> None:
        self.directory = Path(directory)
        self.audience = audience if audience is not None else Audience.anonymous()
        self.links = dict(links or {})
        for name, template in self.links.items():
            check_link_template(name, template)
        self.base_url = check_runbook_base_url(base_url)
        self.max_chars = max_chars
        self.env = SandboxedEnvironment(loader=jinja2.FileSystemLoader(str(self.directory)), autoescape=True,
                                        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                                        keep_trailing_newline=True)
        # Values pasted into a copyable command (queue, actor) are quoted for the shell.
        self.env.filters["shquote"] = shlex.quote
        self._inline: dict[str, jinja2.Template] = {}

    def runbook_url(self, alertname: str, labels: Mapping[str, str] | None = None) -> str:
        """The runbook link: the base URL plus the lower-cased alert name (and its labels, `runbook_url`)."""
        return runbook_url(self.base_url, alertname, labels)

    def with_base_url(self, base_url: str) -> RunbookRenderer:
        """This renderer with its links pointing under `base_url` (e.g. the address a page is served at)."""
        other = copy.copy(self)
        other.base_url = check_runbook_base_url(base_url)
        return other

    def check(self, rule: AlertRule) -> None:
        """Raise PolicyError when the rule's runbook or annotation templates do not compile."""
        if rule.runbook is not None:
            try:
                self.env.get_template(rule.runbook)
            except jinja2.TemplateNotFound:
                raise PolicyError(f"runbook template {rule.runbook!r} not found in {self.directory}",
                                  path=rule.path, line=rule.line, field="runbook") from None
            except jinja2.TemplateSyntaxError as exc:
                raise PolicyError(f"runbook syntax error: {exc.message}", path=exc.filename or rule.runbook,
                                  line=exc.lineno) from None
        if rule.kind == "store":
            for key, source in rule.annotations.items():
                try:
                    self._template(source)
                except jinja2.TemplateSyntaxError as exc:
                    raise PolicyError(f"annotation template error: {exc.message}", path=rule.path, line=rule.line,
                                      field=f"annotations.{key}") from None
            self._check_renders(rule)

    def _check_renders(self, rule: AlertRule) -> None:
        """Render the rule's summary, description and runbook for every grouping it raises (sample
        alerts, with one affected job and with none); PolicyError naming the rule on the first failure."""
        for candidate in sample_alerts(rule):
            for jobs in ([sample_job(candidate)], []):
                context = self.context(candidate, jobs)
                shape = f"labels {', '.join(sorted(candidate.labels))}" + ("" if jobs else ", no affected job")
                templates = [(f"annotations.{key}", functools.partial(self._template, source))
                             for key, source in self._sources(rule).items()]
                if rule.runbook is not None:
                    templates.append(("runbook", functools.partial(self.env.get_template, rule.runbook)))
                for field, template in templates:
                    if field == "runbook":
                        context["summary"] = "sample summary"
                    try:
                        template().render(context)
                    except jinja2.TemplateError as exc:
                        own = field == "runbook" or field.removeprefix("annotations.") in rule.annotations
                        which = field if own else f"{field} (the default)"
                        raise PolicyError(f"rule {rule.name!r}: {which} fails to render for an alert with {shape}: "
                                          f"{type(exc).__name__}: {exc}", path=rule.path, line=rule.line,
                                          field=field) from None

    def _template(self, source: str) -> jinja2.Template:
        template = self._inline.get(source)
        if template is None:
            template = self._inline[source] = self.env.from_string(source)
        return template

    def context(self, candidate: Candidate, jobs: Sequence[JobContext]) -> dict[str, Any]:
        """The template context of one alert (data only)."""
        rule = candidate.rule
        return {
            "alert": {"name": rule.name, "severity": rule.severity, "route": rule.route,
                      "owner": candidate.labels.get("owner"), "value": candidate.value, "for": rule.for_seconds},
            "labels": dict(candidate.labels),
            "value": candidate.value,
            "facts": dict(candidate.context),
            "jobs": [job_view(j, rule.name, self.links, self.audience) for j in jobs],
            "runbook_url": self.runbook_url(rule.name, candidate.labels),
        }

    def annotations(self, candidate: Candidate, jobs: Sequence[JobContext]) -> dict[str, str]:
        """summary (one line), description and runbook_url of one alert (the runbook itself: `runbook`)."""
        context = self.context(candidate, jobs)
        out: dict[str, str] = {}
        for key, source in self._sources(candidate.rule).items():
            text = self._render(functools.partial(self._template, source), context).strip()
            out[key] = cut(" ".join(text.split()) if key == "summary" else text, 1000) or ""
        out["runbook_url"] = context["runbook_url"]
        return out

    def runbook(self, candidate: Candidate, jobs: Sequence[JobContext], *, summary: str | None = None) -> str | None:
        """The rule's runbook rendered as Markdown for one alert, or None when the rule names none.

        `summary` replaces the rule's summary (e.g. for an alert that is not firing: its summary
        template may name labels only a firing alert has).
        """
        rule = candidate.rule
        if rule.runbook is None:
            return None
        context = self.context(candidate, jobs)
        context["summary"] = summary if summary is not None else self.annotations(candidate, jobs)["summary"]
        load = functools.partial(self.env.get_template, rule.runbook)
        return cut(self._render(load, context), self.max_chars) or ""

    @staticmethod
    def _sources(rule: AlertRule) -> dict[str, str]:
        # PromQL annotations are Prometheus (Go) templates: only the defaults render here.
        own = rule.annotations if rule.kind == "store" else {}
        return {"summary": DEFAULT_SUMMARY, "description": DEFAULT_DESCRIPTION, **own}

    @staticmethod
    def _render(template: Callable[[], jinja2.Template], context: dict[str, Any]) -> str:
        # A broken or refused template must not stop the alert itself from going out.
        try:
            return template().render(context)
        except jinja2.TemplateError as exc:
            logger.warning("alert template failed: %s", exc)
            return f"(template error: {type(exc).__name__}: {exc})"
