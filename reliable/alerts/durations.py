"""Durations in alert rules: the one grammar of `reliable.durations`, importable from here too."""

from __future__ import annotations

from ..durations import format_prometheus, parse_duration

__all__ = ["format_prometheus", "parse_duration"]
