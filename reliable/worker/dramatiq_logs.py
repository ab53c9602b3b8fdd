"""Dramatiq's worker log, told what reliable already knows about a failure.

Dramatiq's worker thread logs every exception an actor raises as "Failed to process message ...
with unhandled exception." at ERROR, with a traceback, before any middleware sees it. For a
tracked actor whose policy classifies the exception as rate limited (a 429 honoured: retried on
its own budget, not a failure) that line is noise repeated at every retry, and it trains people to
ignore ERROR lines. `RateLimitedRetries` turns it into one INFO line naming the rule; every other
exception keeps Dramatiq's line as it is.

Dramatiq also warns that an actor's return value "has been discarded" when no Results middleware
is installed; a workflow node's value is not discarded (reliable stores it for the node's
children), so `WorkflowNodeResults` drops that warning for workflow nodes only.
"""

from __future__ import annotations

import logging

import dramatiq

__all__ = ["WORKER_LOGGER", "RateLimitedRetries", "WorkflowNodeResults", "quiet_rate_limited_retries"]

#: The logger of Dramatiq's worker threads (dramatiq.logging.get_logger(__name__, "WorkerThread")).
WORKER_LOGGER = "dramatiq.worker.WorkerThread"
_UNHANDLED = "Failed to process message %s with unhandled exception."


class RateLimitedRetries(logging.Filter):
    """Rewrites Dramatiq's ERROR line for a rate-limited failure of a tracked actor as an INFO line.

    The reliable middleware is found on the broker Dramatiq uses (`dramatiq.get_broker()`), so one
    filter serves every `install` of the process.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Always True (nothing is dropped); the record is rewritten when the failure is expected."""
        if record.msg != _UNHANDLED or not record.exc_info or not isinstance(record.args, tuple) or not record.args:
            return True
        message, exception = record.args[0], record.exc_info[1]
        rule = _rate_limited_rule(message, exception) if exception is not None else None
        if rule is not None:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.msg = "Message %s was rate limited (%s): reliable retries it on its rate-limit budget."
            record.args = (message, rule)
            record.exc_info, record.exc_text = None, None
        return True


class WorkflowNodeResults(logging.Filter):
    """Drops Dramatiq's "returned a value ... discarded" warning when the job running is a workflow node."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for that warning inside a workflow node's run; True for every other record."""
        if record.levelno != logging.WARNING or "returned a value that is not None" not in str(record.msg):
            return True
        from .context import _current

        job = _current.get()
        return job is None or job.workflow_node is None


def _rate_limited_rule(message: object, exception: BaseException) -> str | None:
    from ..registrar import find_installed

    try:
        broker = dramatiq.get_broker()
        installed = find_installed(broker)
        if installed is None:
            return None
        return installed.registration.rate_limited_rule(broker, message, exception)
    except Exception:  # a log line must never fail: keep Dramatiq's own
        return None


def quiet_rate_limited_retries() -> None:
    """Install the filters on Dramatiq's worker logger, once per process."""
    logger = logging.getLogger(WORKER_LOGGER)
    for kind in (RateLimitedRetries, WorkflowNodeResults):
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())
