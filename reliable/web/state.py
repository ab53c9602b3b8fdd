"""What every request handler of the web app reads (`WebState`, at `app.state.reliable`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dramatiq

from ..access import ApiTokens, Principal
from ..control import ContractSource, Control
from ..store import StateStore
from .config import WebConfig

if TYPE_CHECKING:
    from ..queue_pauses import QueueState
    from ..store.job_stats import History
    from ..store.overview import Overview

__all__ = ["WebState"]


@dataclass
class WebState:
    """What every request handler reads: the store, the control plane's parts, the tokens and the config."""

    store: StateStore
    tokens: ApiTokens
    config: WebConfig
    policy: ContractSource | None = None
    broker: dramatiq.Broker | None = None
    actor_options: Mapping[str, Mapping[str, Any]] | None = None
    _overview: tuple[float, Overview] | None = field(default=None, repr=False)
    _overview_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _pauses: tuple[float, QueueState] | None = field(default=None, repr=False)
    _history: dict[str, tuple[float, History]] = field(default_factory=dict, repr=False)

    def overview(self) -> Overview:
        """The overview's figures, computed at most once per `config.overview_ttl` seconds by this
        process: every console tab polls them, so their cost does not grow with the viewers."""
        from ..store.overview import OVERVIEW_QUEUES, overview

        with self._overview_lock:  # one computation at a time; the others wait and share it
            cached = self._overview
            if cached is not None and time.monotonic() - cached[0] < self.config.overview_ttl:
                return cached[1]
            figures = overview(self.store, latency_queues=OVERVIEW_QUEUES)
            self._overview = (time.monotonic(), figures)
            return figures

    def history(self, window: str) -> History:
        """The overview's chart series over `window` (job_stats.WINDOWS: 1h, 24h, 7d), read at most
        once per `config.overview_ttl` seconds per window by this process."""
        from ..store.job_stats import history

        with self._overview_lock:
            cached = self._history.get(window)
            if cached is not None and time.monotonic() - cached[0] < self.config.overview_ttl:
                return cached[1]
            series = history(self.store, window=window)
            self._history[window] = (time.monotonic(), series)
            return series

    def queue_pauses(self) -> QueueState:
        """The paused queues (every console page's banner), read at most once per `config.overview_ttl`
        seconds by this process: one primary-key read of a handful of rows."""
        from ..queue_pauses import paused

        cached = self._pauses
        if cached is not None and time.monotonic() - cached[0] < self.config.overview_ttl:
            return cached[1]
        state = paused(self.store)
        self._pauses = (time.monotonic(), state)
        return state

    def forget_queue_pauses(self) -> None:
        """Read the paused queues again at the next page (this process paused or resumed one)."""
        self._pauses = None

    def control_for(self, principal: Principal) -> Control:
        """A Control acting as `principal`, under the operators policy its role or the proxy's file gives."""
        return Control(self.store, policy=self.policy, broker=self.broker, operators=principal.operators,
                       identity=principal.operator(self.config.host), actor_options=self.actor_options)
