-- The store's writes on SQLite, one named query per entry ("-- name: NAME"). Parameters are :name.
-- A write runs as several statements inside one BEGIN IMMEDIATE transaction (no network: each costs
-- little); :now is resolved first (the `now` query) so every statement of a write shares it.
-- What each parameter means, and how a transition sets it, is reliable/store/writes.py.
-- A query a feature uses is a typed function of reliable/store/*_queries.py: its columns, by name
-- and in order, are the fields of its row type (tests/store/test_named_rows.py checks them).

-- name: now
SELECT coalesce(:now, (julianday('now') - 2440587.5) * 86400.0);

-- name: write_job
-- One write to a job row (a transition, a checkpoint, or nothing); the job's columns, or no row when
-- the guard did not match. The event row follows (event); a job's attempts are read from its events.
UPDATE reliable_jobs SET
    status = coalesce(:to_status, status),
    queue = coalesce(:route_queue, queue),
    previous_status = CASE WHEN :transition THEN status ELSE previous_status END,
    version = version + CASE WHEN :transition THEN 1 ELSE 0 END,
    lease_id = lease_id + CASE WHEN :claim THEN 1 ELSE 0 END,
    attempt = attempt + CASE WHEN :claim THEN 1 WHEN :unclaim THEN -1 ELSE 0 END,
    attempt_id = CASE WHEN :claim THEN :attempt_id ELSE attempt_id END,
    worker_id = CASE WHEN :claim THEN :worker_id ELSE worker_id END,
    started_at = CASE WHEN :claim THEN :now ELSE started_at END,
    lease_expires_at = CASE WHEN :release THEN NULL
                            WHEN :lease_ttl IS NOT NULL THEN :now + :lease_ttl
                            ELSE lease_expires_at END,
    finished_at = CASE WHEN NOT :transition THEN finished_at WHEN :at_rest THEN :now ELSE NULL END,
    retry_at = CASE WHEN NOT :transition THEN retry_at WHEN :delay IS NOT NULL THEN :now + :delay ELSE NULL END,
    scheduled_at = CASE WHEN :schedule THEN :now + coalesce(:delay, 0) ELSE scheduled_at END,
    dispatched_at = CASE :dispatch WHEN 'now' THEN :now WHEN 'clear' THEN NULL ELSE dispatched_at END,
    retry_count = CASE :retries WHEN 'count' THEN retry_count + 1 WHEN 'reset' THEN 0 ELSE retry_count END,
    pause_requested = CASE WHEN :release THEN 0 ELSE pause_requested OR :request_pause END,
    stop_requested = CASE WHEN :release THEN 0 ELSE stop_requested OR :request_stop END,
    cancel_requested = CASE WHEN :release THEN 0 ELSE cancel_requested OR :request_cancel END,
    stop_requested_at = CASE WHEN :release THEN NULL
                             WHEN :request_stop OR :request_cancel THEN coalesce(stop_requested_at, :now)
                             ELSE stop_requested_at END,
    checkpoint = CASE :checkpoint_op WHEN 'save' THEN :checkpoint WHEN 'clear' THEN NULL ELSE checkpoint END,
    checkpoint_version = checkpoint_version + CASE WHEN :checkpoint_op = 'save' THEN 1 ELSE 0 END,
    checkpoint_at = CASE :checkpoint_op WHEN 'save' THEN :now WHEN 'clear' THEN NULL ELSE checkpoint_at END,
    checkpoint_schema = coalesce(:checkpoint_schema, checkpoint_schema),
    last_error_class = CASE WHEN :has_error THEN :error_class ELSE last_error_class END,
    last_error_type = CASE WHEN :has_error THEN :error_type ELSE last_error_type END,
    last_error_message = CASE WHEN :has_error THEN :error_message ELSE last_error_message END,
    updated_at = CASE WHEN :transition OR :checkpoint_op = 'save' THEN :now ELSE updated_at END
WHERE job_id = :job_id
  AND (:sources IS NULL OR status IN (SELECT value FROM json_each(:sources)))
  AND (:lease_id IS NULL OR lease_id = :lease_id)
  AND (:version IS NULL OR version = :version)
  AND (NOT :expired_only OR lease_expires_at < :now)
  AND (NOT :due_only OR retry_at IS NULL OR retry_at <= :now)
  AND (NOT :unpaused_only OR NOT pause_requested)
  AND (NOT :uncancelled_only OR NOT cancel_requested)
  -- A claim by a delivery that is not the job's own message (reliable.delivery_digest).
  AND (:delivery_digest IS NULL OR delivery_digest IS NULL OR delivery_digest = :delivery_digest)
RETURNING job_id, queue, actor, message, status, previous_status, version, lease_id, worker_id,
    lease_expires_at, attempt, attempt_id, started_at, finished_at, retry_count, retry_at, scheduled_at,
    dispatched_at, pause_requested, stop_requested, cancel_requested, stop_requested_at, checkpoint,
    checkpoint_version, checkpoint_schema, checkpoint_at, owner, workflow_id, trace_id, parent_job_id,
    last_error_class, last_error_type, last_error_message, created_at, updated_at, delivery_digest;

-- name: event
-- The event row of a write_job, from the row it just wrote.
INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
    lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
    retry_count, checkpoint, operator, reason, host, detail, traceback)
SELECT job_id, :now, :event, CASE WHEN :transition THEN previous_status ELSE status END, status, version,
    attempt, attempt_id, coalesce(:event_lease_id, lease_id),
    coalesce(:event_worker_id, CASE WHEN :operator IS NULL THEN worker_id END),
    queue, actor, workflow_id, trace_id, :error_class, :error_type, :error_message, retry_count, checkpoint,
    :operator, :reason, :host, :detail, :traceback
FROM reliable_jobs WHERE job_id = :job_id
RETURNING id, job_id, at, event, from_status, to_status, version, attempt, attempt_id, lease_id, worker_id,
    queue, actor, workflow_id, trace_id, error_class, error_type, error_message, retry_count, checkpoint,
    operator, reason, host, detail, traceback;

-- name: enqueued_event
-- The `enqueued` event of a newly registered job.
INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
    lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
    retry_count, checkpoint, operator, reason, host, detail, traceback)
SELECT job_id, created_at, 'enqueued', NULL, status, version, attempt, attempt_id, lease_id, NULL, queue,
    actor, workflow_id, trace_id, NULL, NULL, NULL, retry_count, checkpoint, NULL, NULL, NULL, :detail, NULL
FROM reliable_jobs WHERE job_id = :job_id
RETURNING id, job_id, at, event, from_status, to_status, version, attempt, attempt_id, lease_id, worker_id,
    queue, actor, workflow_id, trace_id, error_class, error_type, error_message, retry_count, checkpoint,
    operator, reason, host, detail, traceback;

-- name: insert_job
-- Register one PENDING job; no row when the job_id exists already.
INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, retry_count,
    scheduled_at, dispatched_at, owner, workflow_id, trace_id, parent_job_id, checkpoint_schema,
    checkpoint_version, pause_requested, stop_requested, cancel_requested, created_at, updated_at,
    delivery_digest)
VALUES (:job_id, :queue, :actor, :message, :status, 1, 0, 0, 0, :now + :delay, :now, :owner, :workflow_id,
    :trace_id, :parent_job_id, :checkpoint_schema, 0, 0, 0, 0, :now, :now, :delivery_digest)
ON CONFLICT (job_id) DO NOTHING
RETURNING job_id;

-- name: registered_digests
-- What the jobs a registration found existing were registered with (a re-send is compared).
SELECT job_id, actor, delivery_digest FROM reliable_jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: renew
-- The heartbeat: extend every lease the process holds in one statement; the leases still held.
UPDATE reliable_jobs
SET lease_expires_at = :now + :lease_ttl, worker_id = :worker_id
WHERE (job_id, lease_id) IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]')
                             FROM json_each(:leases))
  AND status IN (SELECT value FROM json_each(:active))
RETURNING job_id, lease_id, status, pause_requested, stop_requested, cancel_requested, lease_expires_at,
    stop_requested_at;

-- name: beat
-- Stamps the liveness row (see postgresql.sql's renew): run in the heartbeat's transaction.
INSERT INTO reliable_liveness (id, last_beat_at) VALUES (1, :now)
ON CONFLICT (id) DO UPDATE SET
    outage_ended_at = CASE WHEN excluded.last_beat_at - last_beat_at > :lease_ttl
                           THEN excluded.last_beat_at ELSE outage_ended_at END,
    last_beat_at = excluded.last_beat_at;

-- name: process_beat
-- The process's own record (migration 0014): run in the heartbeat's transaction, or alone by a
-- heartbeat holding no lease.
UPDATE reliable_worker_processes SET last_beat_at = :now WHERE worker_id = :worker_id;

-- name: job_status
-- The fast path's look before a run: the state and the delivery digest, by primary key.
SELECT status, delivery_digest FROM reliable_jobs WHERE job_id = :job_id;

-- name: job_ids_by_prefix
-- The ids starting with :prefix, smallest first: a range on the primary key (LIKE would not use its
-- index), then the exact test. :prefix_end is above every id starting with :prefix (StateStore).
SELECT job_id FROM reliable_jobs
WHERE job_id >= :prefix AND job_id < :prefix_end AND substr(job_id, 1, length(:prefix)) = :prefix
ORDER BY job_id LIMIT :limit;

-- name: outage_ended_at
SELECT outage_ended_at FROM reliable_liveness WHERE id = 1;

-- name: holds_lease
SELECT 1 FROM reliable_jobs
WHERE job_id = :job_id AND lease_id = :lease_id AND status IN (SELECT value FROM json_each(:active));

-- name: insert_effect
INSERT INTO reliable_effects (job_id, op_key, attempt_id, lease_id, applied_at, result, duplicates)
VALUES (:job_id, :op_key, :attempt_id, :lease_id, :now, :result, 0)
ON CONFLICT (job_id, op_key) DO NOTHING
RETURNING op_key;

-- name: count_duplicate_effect
UPDATE reliable_effects SET duplicates = duplicates + 1, last_duplicate_at = :now
WHERE job_id = :job_id AND op_key = :op_key
RETURNING duplicates, attempt_id;

-- name: mark_dispatched
-- The sweeper's compare-and-set on dispatched_at: only one of several sweepers publishes.
UPDATE reliable_jobs SET dispatched_at = :now
WHERE job_id = :job_id AND status = :status AND version = :version AND dispatched_at IS :dispatched_at
RETURNING job_id;

-- name: event_details
SELECT detail FROM reliable_job_events WHERE job_id = :job_id AND event = :event ORDER BY id;

-- name: create_barrier
INSERT INTO reliable_barriers (barrier_id, parties, remaining, created_at)
VALUES (:barrier_id, :parties, :parties, :now)
ON CONFLICT (barrier_id) DO NOTHING
RETURNING barrier_id;

-- name: arrive_at_barrier
-- One member arrived (in the transaction committing its success): how many are still awaited.
UPDATE reliable_barriers SET remaining = remaining - 1
WHERE barrier_id = :barrier_id AND remaining > 0
RETURNING remaining;

-- Workflows (reliable/store/workflows.py): each write is one BEGIN IMMEDIATE transaction (SQLite's
-- single writer), so two nodes finishing at once are serialised as on PostgreSQL by the row lock.

-- name: lock_workflow
SELECT workflow_id, name, status, hold, run FROM reliable_workflows WHERE workflow_id = :workflow_id;

-- name: workflow_nodes
SELECT n.node, n.job_id, j.status, n.trigger, n.on_upstream_failure, n.pass_results,
       n.result IS NULL AND n.result_note IS NOT NULL, n.digest
FROM reliable_workflow_nodes n LEFT JOIN reliable_jobs j ON j.job_id = n.job_id
WHERE n.workflow_id = :workflow_id ORDER BY n.position;

-- name: workflow_edges
SELECT parent, child FROM reliable_workflow_edges WHERE workflow_id = :workflow_id ORDER BY child, position;

-- name: workflow_node_messages
SELECT node, message, owner, checkpoint_schema, queue, actor, job_id, result
FROM reliable_workflow_nodes WHERE workflow_id = :workflow_id;

-- name: insert_workflow
INSERT INTO reliable_workflows (workflow_id, name, status, hold, run, owner, created_by, created_at, updated_at,
    checked_at)
VALUES (:workflow_id, :name, :status, NULL, 1, :owner, :created_by, :now, :now, :now);

-- name: insert_workflow_node
INSERT INTO reliable_workflow_nodes (workflow_id, node, position, actor, queue, message, owner, checkpoint_schema,
    code_version, digest, trigger, on_upstream_failure, pass_results, job_id, run)
VALUES (:workflow_id, :node, :position, :actor, :queue, :message, :owner, :checkpoint_schema, :code_version,
    :digest, :trigger, :on_upstream_failure, :pass_results, :job_id, 1);

-- name: insert_workflow_edge
INSERT INTO reliable_workflow_edges (workflow_id, parent, child, position)
VALUES (:workflow_id, :parent, :child, :position);

-- name: insert_workflow_event
INSERT INTO reliable_workflow_events (workflow_id, at, event, from_status, to_status, run, operator, source, reason,
    detail)
VALUES (:workflow_id, :now, :event, :from_status, :to_status, :run, :operator, :source, :reason, :detail);

-- name: update_workflow
UPDATE reliable_workflows
SET status = :status, hold = :hold, run = :run, checked_at = :now,
    updated_at = CASE WHEN status = :status THEN updated_at ELSE :now END,
    finished_at = CASE WHEN :final THEN coalesce(finished_at, :now) ELSE NULL END
WHERE workflow_id = :workflow_id;

-- name: assign_workflow_node
-- A new run of a node: a new job id, its result cleared (and, for changed inputs, a new message).
UPDATE reliable_workflow_nodes
SET job_id = :job_id, run = :run, result = NULL, result_note = NULL,
    message = coalesce(:message, message), digest = coalesce(:digest, digest),
    code_version = CASE WHEN :message IS NULL THEN code_version ELSE :code_version END
WHERE workflow_id = :workflow_id AND node = :node;

-- name: save_node_result
-- A node's result, in the transaction that commits its job's success.
UPDATE reliable_workflow_nodes SET result = :result, result_note = :result_note WHERE job_id = :job_id;

-- Schedules (reliable/schedules/storage.py). A schedule's writes run in one transaction that
-- reads its row first (lock_schedule), so every scheduler decides from what the last one wrote.

-- name: lock_schedule
SELECT name, definition, template, paused, decided_until, next_slot, last_slot, :now AS now, slot_key
FROM reliable_schedules WHERE name = :name;

-- name: insert_schedule
-- A schedule declared for the first time; no row when it exists.
INSERT INTO reliable_schedules (name, actor, queue, definition, template, paused, decided_until, next_slot,
    last_slot, created_at, updated_at)
VALUES (:name, :actor, :queue, :definition, :template, :paused, coalesce(:decided_until, :now), :next_slot, NULL,
    :now, :now)
ON CONFLICT (name) DO NOTHING
RETURNING decided_until;

-- name: redeclare_schedule
-- A new declaration of a known schedule: its runtime state (paused, decided_until, last_slot) stays.
UPDATE reliable_schedules SET actor = :actor, queue = :queue, definition = :definition, template = :template,
    next_slot = :next_slot, updated_at = :now
WHERE name = :name;

-- name: decide_schedule
-- Slots decided up to :decided_until (fired or dropped), under the row read by lock_schedule.
UPDATE reliable_schedules SET decided_until = :decided_until, next_slot = :next_slot,
    last_slot = coalesce(:last_slot, last_slot), updated_at = :now
WHERE name = :name;

-- name: set_schedule_paused
UPDATE reliable_schedules SET paused = :paused, decided_until = coalesce(:decided_until, decided_until),
    next_slot = coalesce(:next_slot, next_slot), updated_at = :now
WHERE name = :name;

-- name: insert_schedule_slot
-- A slot fires once: no row when it fired already.
INSERT INTO reliable_schedule_slots (schedule, slot_at, job_id, kind, fired_at)
VALUES (:schedule, :slot_at, :job_id, :kind, :now)
ON CONFLICT (schedule, slot_at) DO NOTHING
RETURNING job_id;

-- name: set_schedule_slot_key
-- The secret a schedule's slot job ids are derived from, set once by the first decision that needs
-- it, under the row lock_schedule holds (so two schedulers never pick two keys).
UPDATE reliable_schedules SET slot_key = :slot_key WHERE name = :name AND slot_key IS NULL;

-- name: schedule_slot_conflict
-- A slot whose job id another job holds (other content): the slot is not fired, the schedule counts it.
UPDATE reliable_schedules SET slot_conflicts = slot_conflicts + 1 WHERE name = :name;

-- name: unfire_schedule_slot
-- The slot row insert_schedule_slot just wrote, taken back (its job id was taken: a conflict).
DELETE FROM reliable_schedule_slots WHERE schedule = :schedule AND slot_at = :slot_at;

-- name: schedule_event
INSERT INTO reliable_schedule_events (schedule, at, event, operator, reason, host, detail)
VALUES (:schedule, :now, :event, :operator, :reason, :host, :detail)
RETURNING at;

-- name: due_schedules
-- Every scheduler's tick: the schedules not paused whose next slot is due at :at.
SELECT name FROM reliable_schedules WHERE NOT paused AND next_slot <= :at ORDER BY next_slot, name;

-- name: delete_schedule
-- An operator removed the schedule (audited first); its fired slots stay as history.
DELETE FROM reliable_schedules WHERE name = :name;

-- The schedules' reads (see postgresql.sql).

-- name: list_schedules
SELECT name, actor, queue, definition, template, paused, decided_until, next_slot, last_slot, created_at, updated_at
FROM reliable_schedules ORDER BY name;

-- name: get_schedule
SELECT name, actor, queue, definition, template, paused, decided_until, next_slot, last_slot, created_at, updated_at
FROM reliable_schedules WHERE name = :name;

-- name: list_schedule_slots
SELECT s.schedule, s.slot_at, s.job_id, s.kind, s.fired_at, j.status
FROM reliable_schedule_slots s LEFT JOIN reliable_jobs j ON j.job_id = s.job_id
WHERE s.schedule = :name ORDER BY s.slot_at DESC LIMIT :limit;

-- name: list_schedule_events
SELECT id, schedule, at, event, operator, reason, host, detail FROM reliable_schedule_events
WHERE schedule = :name ORDER BY id DESC LIMIT :limit;

-- name: count_schedule_slots
-- :names is JSON text (a list) or NULL for every schedule.
SELECT schedule, count(*) AS fired FROM reliable_schedule_slots
WHERE :names IS NULL OR schedule IN (SELECT value FROM json_each(:names))
GROUP BY schedule;

-- Limits (reliable/limits/storage.py; see postgresql.sql). SQLite runs each step as a few
-- statements in one BEGIN IMMEDIATE transaction (one writer at a time: no row locks to skip).

-- name: limit_ensure
INSERT INTO reliable_limits (name, declared, effective, streak, updated_at)
VALUES (:name, :declared, :declared, 0, :now)
ON CONFLICT (name) DO UPDATE SET
    effective = min(CASE WHEN effective >= declared THEN excluded.declared
                         ELSE min(effective, excluded.declared) END, coalesce(ceiling, excluded.declared)),
    declared = excluded.declared, updated_at = excluded.updated_at
WHERE declared <> excluded.declared;

-- name: limit_ensure_slots
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO reliable_limit_slots (name, key, slot) SELECT :name, :key, i FROM n WHERE true
ON CONFLICT (name, key, slot) DO NOTHING;

-- name: limit_ensure_buckets
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :count)
INSERT INTO reliable_limit_buckets (name, key, bucket, tokens, updated_at)
SELECT :name, :key, i, :capacity, :now FROM n WHERE true
ON CONFLICT (name, key, bucket) DO NOTHING;

-- name: limit_state
-- `declared` capped by an operator's ceiling (migration 0023), as the adaptive restore reads it.
SELECT min(declared, coalesce(ceiling, declared)) AS declared, effective, streak, last_rate_limited_at, changed_at, :now AS now FROM reliable_limits WHERE name = :name;

-- name: limit_pick_slot
SELECT s.slot FROM reliable_limit_slots s
WHERE s.name = :name AND s.key = :key AND s.slot < :effective
  AND (s.holder_job IS NULL OR NOT (
      (s.expires_at >= :now AND NOT EXISTS (
          SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id >= s.holder_lease))
      OR EXISTS (
          SELECT 1 FROM reliable_jobs j
          WHERE j.job_id = s.holder_job AND j.lease_id = s.holder_lease
            AND j.status IN (SELECT value FROM json_each(:active)) AND j.lease_expires_at >= :now)))
ORDER BY s.slot
LIMIT 1;

-- name: limit_hold_slot
UPDATE reliable_limit_slots
SET holder_job = :job_id, expires_at = :now + :ttl,
    holder_lease = (SELECT j.lease_id + 1 FROM reliable_jobs j WHERE j.job_id = :job_id)
WHERE name = :name AND key = :key AND slot = :slot
RETURNING slot, holder_lease;

-- name: limit_bind_slot
UPDATE reliable_limit_slots SET holder_lease = :lease_id
WHERE name = :name AND key = :key AND slot = :slot AND holder_job = :job_id
RETURNING slot;

-- name: limit_release_slot
UPDATE reliable_limit_slots SET holder_job = NULL, holder_lease = NULL, expires_at = NULL
WHERE name = :name AND key = :key AND slot = :slot AND holder_job = :job_id;

-- name: limit_mark_deferred
-- A deferred delivery comes back in :delay seconds: the sweeper counts from then.
UPDATE reliable_jobs SET dispatched_at = :now + :delay WHERE job_id = :job_id AND status = 'PENDING';

-- name: limit_pick_bucket
-- The fullest bucket and what it holds now (refilled since its last take).
SELECT bucket, min(:capacity, tokens + (:now - updated_at) * :refill) AS have FROM reliable_limit_buckets
WHERE name = :name AND key = :key AND bucket < :shards
ORDER BY have DESC, (bucket + :start) % :shards
LIMIT 1;

-- name: limit_spend_token
UPDATE reliable_limit_buckets SET tokens = :have - 1, updated_at = :now
WHERE name = :name AND key = :key AND bucket = :bucket;

-- name: limit_lock
SELECT min(declared, coalesce(ceiling, declared)) AS declared, effective, streak, last_rate_limited_at, changed_at, :now AS now FROM reliable_limits WHERE name = :name;

-- name: limit_update
UPDATE reliable_limits SET effective = :effective, streak = :streak,
    last_rate_limited_at = :last_rate_limited_at, changed_at = :changed_at, updated_at = :now
WHERE name = :name;

-- name: limit_holders
SELECT s.key, s.slot, s.holder_job FROM reliable_limit_slots s
WHERE s.name = :name AND s.holder_job IS NOT NULL AND (
    (s.expires_at >= :now AND NOT EXISTS (
        SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id >= s.holder_lease))
    OR EXISTS (
        SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id = s.holder_lease
          AND j.status IN (SELECT value FROM json_each(:active)) AND j.lease_expires_at >= :now))
ORDER BY s.key, s.slot;

-- Retention (see postgresql.sql): each batch is one BEGIN IMMEDIATE transaction that picks its jobs,
-- then deletes their rows; other writers wait for one batch at most.

-- name: prune_count_jobs
WITH doomed AS (
    SELECT j.job_id FROM reliable_jobs j
    WHERE j.status IN (SELECT value FROM json_each(:states)) AND j.updated_at < :cut
      AND NOT EXISTS (SELECT 1 FROM reliable_workflows w WHERE w.workflow_id = j.workflow_id
                      AND NOT (w.status IN (SELECT value FROM json_each(:workflow_final)) AND w.finished_at < :cut))
)
SELECT (SELECT count(*) FROM doomed),
       (SELECT count(*) FROM reliable_job_events e JOIN doomed d ON e.job_id = d.job_id),
       (SELECT count(*) FROM reliable_job_events e JOIN doomed d ON e.job_id = d.job_id
        WHERE e.to_status IN (SELECT value FROM json_each(:active))
          AND coalesce(e.from_status NOT IN (SELECT value FROM json_each(:active)), 1)),
       (SELECT count(*) FROM reliable_effects f JOIN doomed d ON f.job_id = d.job_id);

-- name: prune_pick_jobs
SELECT j.job_id FROM reliable_jobs j
WHERE j.status = :state AND j.updated_at < :cut
  AND NOT EXISTS (SELECT 1 FROM reliable_workflows w WHERE w.workflow_id = j.workflow_id
                  AND NOT (w.status IN (SELECT value FROM json_each(:workflow_final)) AND w.finished_at < :cut))
ORDER BY j.updated_at LIMIT :batch;

-- name: prune_job_events
-- One row per event deleted, with its states (the caller counts the attempts: starts_attempt).
DELETE FROM reliable_job_events WHERE job_id IN (SELECT value FROM json_each(:job_ids))
RETURNING from_status, to_status;

-- name: prune_job_effects
DELETE FROM reliable_effects WHERE job_id IN (SELECT value FROM json_each(:job_ids)) RETURNING 1;

-- name: prune_job_rows
DELETE FROM reliable_jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids)) RETURNING 1;

-- name: prune_count_workflows
SELECT count(*) FROM reliable_workflows
WHERE status IN (SELECT value FROM json_each(:workflow_final)) AND finished_at < :cut;

-- name: prune_pick_workflows
SELECT w.workflow_id FROM reliable_workflows w
WHERE w.status IN (SELECT value FROM json_each(:workflow_final)) AND w.finished_at < :cut
  AND NOT EXISTS (SELECT 1 FROM reliable_jobs j WHERE j.workflow_id = w.workflow_id)
LIMIT :batch;

-- name: prune_workflow_nodes
DELETE FROM reliable_workflow_nodes WHERE workflow_id IN (SELECT value FROM json_each(:workflow_ids)) RETURNING 1;

-- name: prune_workflow_edges
DELETE FROM reliable_workflow_edges WHERE workflow_id IN (SELECT value FROM json_each(:workflow_ids)) RETURNING 1;

-- name: prune_workflow_events
DELETE FROM reliable_workflow_events WHERE workflow_id IN (SELECT value FROM json_each(:workflow_ids)) RETURNING 1;

-- name: prune_workflow_rows
DELETE FROM reliable_workflows WHERE workflow_id IN (SELECT value FROM json_each(:workflow_ids)) RETURNING 1;

-- name: prune_count_operations
SELECT count(*) FROM reliable_operations
WHERE status IN (SELECT value FROM json_each(:ended)) AND coalesce(finished_at, created_at) < :cut;

-- name: prune_operations
DELETE FROM reliable_operations WHERE operation_id IN (
    SELECT operation_id FROM reliable_operations
    WHERE status IN (SELECT value FROM json_each(:ended)) AND coalesce(finished_at, created_at) < :cut
    LIMIT :batch) RETURNING 1;

-- Queue pauses (see postgresql.sql).

-- name: pause_queue
INSERT INTO reliable_queue_pauses (queue, paused_at, operator, host, source, reason)
VALUES (:queue, :now, :operator, :host, :source, :reason)
ON CONFLICT (queue) DO NOTHING
RETURNING paused_at;

-- name: resume_queue
DELETE FROM reliable_queue_pauses WHERE queue = :queue RETURNING paused_at;

-- name: queue_event
INSERT INTO reliable_queue_events (queue, at, event, operator, host, source, reason, detail)
VALUES (:queue, :now, :event, :operator, :host, :source, :reason, :detail);

-- name: list_queue_pauses
SELECT queue, paused_at, operator, host, source, reason, :now AS now
FROM reliable_queue_pauses ORDER BY queue;

-- name: list_queue_events
SELECT id, queue, at, event, operator, host, source, reason, detail FROM reliable_queue_events
WHERE queue = :queue ORDER BY id DESC LIMIT :limit;

-- name: job_statuses
-- The fast path's batched look (reliable.worker.waiting): the state and delivery digest of the
-- delivered job and of the fast-path messages waiting in the process, by primary key, in one read.
SELECT job_id, status, delivery_digest FROM reliable_jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids));
