"""Helpers for the observability tests: reading scraped samples (the exporter and scraping live in support)."""

from __future__ import annotations

from collections.abc import Mapping

from support import exporter, scrape

__all__ = ["exporter", "families", "sample", "scrape"]


def sample(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float | None:
    """One sample's value, or None when absent."""
    return samples.get((name, tuple(sorted(labels.items()))))


def families(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]) -> set[str]:
    """The sample names present."""
    return {name for name, _ in samples}
