"""What reaches Alertmanager is bounded (issue 30 item 6): label values cut to MAX_LABEL_VALUE with a
digest of the whole value (two alerts that differ after the cut stay two), annotations cut to
MAX_ANNOTATION with a marker; short values are sent as they are. Pure: `lifecycle.payload`."""

from __future__ import annotations

from reliable.alerts.lifecycle import MAX_ANNOTATION, MAX_LABEL_VALUE, AlertState, DeliveryPolicy, payload

NOW = 1_800_000_000.0


def sent(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, dict[str, str]]:
    state = AlertState("fp", "JobStuck", labels, "firing", annotations=annotations, starts_at=NOW)
    return payload(state, NOW, DeliveryPolicy())


def test_long_label_values_and_annotations_are_cut_to_the_documented_lengths() -> None:
    long_a, long_b = "a" * 100_000 + "1", "a" * 100_000 + "2"
    first = sent({"alertname": "JobStuck", "job_id": long_a}, {"summary": "s" * 50_000, "runbook_url": "http://x"})
    second = sent({"alertname": "JobStuck", "job_id": long_b}, {})
    assert len(first["labels"]["job_id"]) == MAX_LABEL_VALUE
    assert first["labels"]["job_id"].startswith("a" * 200) and first["labels"]["job_id"] != second["labels"]["job_id"]
    assert len(first["annotations"]["summary"]) == MAX_ANNOTATION
    assert first["annotations"]["summary"].endswith("[cut: 50000 chars]")
    assert first["labels"]["alertname"] == "JobStuck" and first["annotations"]["runbook_url"] == "http://x"


def test_values_at_the_limit_are_sent_whole() -> None:
    exact = sent({"queue": "q" * MAX_LABEL_VALUE}, {"summary": "s" * MAX_ANNOTATION})
    assert exact["labels"]["queue"] == "q" * MAX_LABEL_VALUE and exact["annotations"]["summary"] == "s" * MAX_ANNOTATION
