"""Progress: a running attempt's writes, each fenced by its lease: the heartbeat, checkpoints, effects."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from ..states import JobStatus
from .core import StoreCore
from .json_text import _detail, _json_text, checkpoint_json
from .records import Effect, LeaseStatus
from .schema import effects
from .sqlrunner import Tx
from .writes import event_write

__all__ = ["WorkerProgress"]


class WorkerProgress(StoreCore):
    """The heartbeat (lease renewal, the process's stamp), checkpoints and effect records of an attempt."""

    def renew(self, worker_id: str, leases: Iterable[tuple[str, int]],
              lease_ttl: float) -> dict[str, LeaseStatus]:
        """Extend every lease in `leases` in one statement; return the ones still held.

        A lease missing from the answer was lost (expired and reassigned, or the job left the
        RUNNING/STOPPING states). The same statement stamps the process's record (`worker_id`).
        The answer carries the control flags, so a pause or stop reaches
        a running job within one heartbeat.
        """
        pairs = list(leases)
        if not pairs:
            return {}
        self.check_schema()
        return {row["job_id"]: self._lease_status(row) for row in self._sql.renew(worker_id, pairs, lease_ttl)}

    def process_beat(self, worker_id: str) -> None:
        """A heartbeat holding no lease: stamp the process's record (reliable.store.processes) only."""
        self.check_schema()
        self._sql.process_beat(worker_id)

    @staticmethod
    def _lease_status(row: Mapping[str, Any]) -> LeaseStatus:
        return LeaseStatus(
            job_id=row["job_id"], lease_id=row["lease_id"], status=JobStatus(row["status"]),
            pause_requested=bool(row["pause_requested"]), stop_requested=bool(row["stop_requested"]),
            cancel_requested=bool(row["cancel_requested"]),
            lease_expires_at=float(row["lease_expires_at"]),
            stop_requested_at=row.get("stop_requested_at"),
        )

    def save_checkpoint(self, job_id: str, lease_id: int, value: Any, *, lease_ttl: float,
                        worker_id: str | None = None) -> LeaseStatus:
        """Durably record the job's progress (fenced); renew the lease; return the control flags.

        `value` must round-trip through JSON (see `checkpoint_json`): TypeError otherwise.
        """
        text = checkpoint_json(value)
        self.check_schema()
        write = event_write(job_id, "checkpoint", lease_id=lease_id, active_only=True, checkpoint=text,
                            lease_ttl=lease_ttl, worker_id=worker_id)
        result = self._sql.write(write)
        if result is None:
            raise self._stale(job_id, lease_id, "checkpoint", worker_id)
        self._emit_one(result)
        return self._lease_status(result[0])

    def record_effect(self, job_id: str, lease_id: int, op_key: str, *, attempt_id: str | None = None,
                      result: Any = None, worker_id: str | None = None) -> Effect:
        """Record that the unit `op_key` of this job was applied; detect and count replays.

        Fenced: a worker that lost its lease gets LeaseLost and nothing is written. The first
        record of a key returns ``applied=True``; a later one (a replay after a crash) returns
        ``applied=False`` and increments the key's duplicate count. A first record of a key that an
        earlier attempt applied but could not record (see `effect_unrecorded`) is flagged
        ``possible_duplicate`` with a `possible_duplicate_effect` event.
        """
        self.check_schema()
        written: list[tuple[dict[str, Any], dict[str, Any]]] = []
        with self._sql.transaction() as tx:
            if not self._sql.holds_lease(tx, job_id, lease_id):
                effect = None
            elif self._sql.insert_effect(tx, job_id, op_key, attempt_id=attempt_id, lease_id=lease_id,
                                         result=_json_text(result)):
                possible = self._unrecorded(tx, job_id, op_key)
                effect = Effect(job_id, op_key, applied=True, duplicates=0, attempt_id=attempt_id,
                                possible_duplicate=possible)
                if possible:
                    written.append(self._write_in(tx, event_write(
                        job_id, "possible_duplicate_effect", worker_id=worker_id, lease_id=lease_id,
                        detail=_detail({"op_key": op_key, "attempt_id": attempt_id}))))
            else:
                duplicates, first = self._sql.count_duplicate_effect(tx, job_id, op_key)
                effect = Effect(job_id, op_key, applied=False, duplicates=duplicates, attempt_id=first)
                written.append(self._write_in(tx, event_write(
                    job_id, "duplicate_effect", worker_id=worker_id, lease_id=lease_id,
                    detail=_detail({"op_key": op_key, "duplicates": duplicates, "first_attempt_id": first}))))
        if effect is None:
            raise self._stale(job_id, lease_id, "record_effect", worker_id)
        for item in written:
            self._emit_one(item)
        return effect

    def effect_unrecorded(self, job_id: str, op_key: str, *, lease_id: int, worker_id: str | None = None) -> None:
        """Note that the unit `op_key` may have been applied but its record never committed.

        Written at the end of an attempt whose `record_effect` could not reach the store; the next
        first record of the same key is then reported as a possible duplicate.
        """
        self.record_event(job_id, "effect_unrecorded", worker_id=worker_id, lease_id=lease_id,
                          detail={"op_key": op_key})

    def _unrecorded(self, tx: Tx, job_id: str, op_key: str) -> bool:
        details = self._sql.event_details(tx, job_id, "effect_unrecorded")
        return any(json.loads(d or "{}").get("op_key") == op_key for d in details)

    def effect_recorded(self, job_id: str, op_key: str) -> bool:
        """Whether the unit `op_key` of this job was already recorded as applied."""
        with self._read() as conn:
            return conn.execute(
                select(effects.c.op_key).where(effects.c.job_id == job_id, effects.c.op_key == op_key)
            ).first() is not None
