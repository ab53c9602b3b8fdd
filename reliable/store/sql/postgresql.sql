-- The store's writes on PostgreSQL, one named query per entry ("-- name: NAME").
-- Parameters are psycopg's %(name)s, cast where a NULL would otherwise be ambiguous.
-- What each parameter means, and how a transition sets it, is reliable/store/writes.py.

-- name: write_job
-- One write to a job row (a transition, a checkpoint, or nothing) plus its event row (and the
-- attempt row a claim starts or a transition out of an active state ends), in ONE statement.
-- Returns the job's columns followed by the event's; no row when the guard did not match.
-- Each parameter appears once (in `p`): psycopg caches the parsed statement, and PostgreSQL plans
-- one row lookup by primary key.
WITH p AS (
    SELECT %(event)s::text AS event, %(sources)s::text[] AS sources, %(lease_id)s::int8 AS lease_id,
        %(version)s::int8 AS version, %(expired_only)s::bool AS expired_only, %(due_only)s::bool AS due_only,
        %(unpaused_only)s::bool AS unpaused_only, %(uncancelled_only)s::bool AS uncancelled_only,
        %(to_status)s::text AS to_status, %(transition)s::bool AS transition, %(claim)s::bool AS claim,
        %(release)s::bool AS release, %(lease_ttl)s::float8 AS lease_ttl, %(at_rest)s::bool AS at_rest,
        %(delay)s::float8 AS delay, %(schedule)s::bool AS schedule, %(dispatch)s::text AS dispatch,
        %(retries)s::text AS retries, %(request_pause)s::bool AS request_pause,
        %(request_stop)s::bool AS request_stop, %(request_cancel)s::bool AS request_cancel,
        %(checkpoint_op)s::text AS checkpoint_op, %(checkpoint)s::text AS checkpoint,
        %(checkpoint_schema)s::int4 AS checkpoint_schema, %(worker_id)s::text AS worker_id,
        %(attempt_id)s::text AS attempt_id, %(end_attempt)s::bool AS end_attempt,
        %(has_error)s::bool AS has_error, %(error_class)s::text AS error_class,
        %(error_type)s::text AS error_type, %(error_message)s::text AS error_message,
        %(event_worker_id)s::text AS event_worker_id, %(event_lease_id)s::int8 AS event_lease_id,
        %(operator)s::text AS operator, %(reason)s::text AS reason, %(host)s::text AS host,
        %(detail)s::text AS detail,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
j AS (
    UPDATE reliable_jobs AS r SET
        status = coalesce(p.to_status, r.status),
        previous_status = CASE WHEN p.transition THEN r.status ELSE r.previous_status END,
        version = r.version + CASE WHEN p.transition THEN 1 ELSE 0 END,
        lease_id = r.lease_id + CASE WHEN p.claim THEN 1 ELSE 0 END,
        attempt = r.attempt + CASE WHEN p.claim THEN 1 ELSE 0 END,
        attempt_id = CASE WHEN p.claim THEN p.attempt_id ELSE r.attempt_id END,
        worker_id = CASE WHEN p.claim THEN p.worker_id ELSE r.worker_id END,
        started_at = CASE WHEN p.claim THEN p.now ELSE r.started_at END,
        lease_expires_at = CASE WHEN p.release THEN NULL WHEN p.lease_ttl IS NOT NULL THEN p.now + p.lease_ttl
                                ELSE r.lease_expires_at END,
        finished_at = CASE WHEN NOT p.transition THEN r.finished_at WHEN p.at_rest THEN p.now ELSE NULL END,
        retry_at = CASE WHEN NOT p.transition THEN r.retry_at WHEN p.delay IS NOT NULL THEN p.now + p.delay END,
        scheduled_at = CASE WHEN p.schedule THEN p.now + coalesce(p.delay, 0) ELSE r.scheduled_at END,
        dispatched_at = CASE p.dispatch WHEN 'now' THEN p.now WHEN 'clear' THEN NULL ELSE r.dispatched_at END,
        retry_count = CASE p.retries WHEN 'count' THEN r.retry_count + 1 WHEN 'reset' THEN 0
                      ELSE r.retry_count END,
        pause_requested = NOT p.release AND (r.pause_requested OR p.request_pause),
        stop_requested = NOT p.release AND (r.stop_requested OR p.request_stop),
        cancel_requested = NOT p.release AND (r.cancel_requested OR p.request_cancel),
        stop_requested_at = CASE WHEN p.release THEN NULL
                                 WHEN p.request_stop OR p.request_cancel THEN coalesce(r.stop_requested_at, p.now)
                                 ELSE r.stop_requested_at END,
        checkpoint = CASE p.checkpoint_op WHEN 'save' THEN p.checkpoint WHEN 'clear' THEN NULL
                     ELSE r.checkpoint END,
        checkpoint_version = r.checkpoint_version + CASE WHEN p.checkpoint_op = 'save' THEN 1 ELSE 0 END,
        checkpoint_at = CASE p.checkpoint_op WHEN 'save' THEN p.now WHEN 'clear' THEN NULL
                        ELSE r.checkpoint_at END,
        checkpoint_schema = coalesce(p.checkpoint_schema, r.checkpoint_schema),
        last_error_class = CASE WHEN p.has_error THEN p.error_class ELSE r.last_error_class END,
        last_error_type = CASE WHEN p.has_error THEN p.error_type ELSE r.last_error_type END,
        last_error_message = CASE WHEN p.has_error THEN p.error_message ELSE r.last_error_message END,
        updated_at = CASE WHEN p.transition OR p.checkpoint_op = 'save' THEN p.now ELSE r.updated_at END
    FROM p
    WHERE r.job_id = %(job_id)s
      AND (p.sources IS NULL OR r.status = ANY(p.sources))
      AND (p.lease_id IS NULL OR r.lease_id = p.lease_id)
      AND (p.version IS NULL OR r.version = p.version)
      AND (NOT p.expired_only OR r.lease_expires_at < p.now)
      AND (NOT p.due_only OR r.retry_at IS NULL OR r.retry_at <= p.now)
      AND (NOT p.unpaused_only OR NOT r.pause_requested)
      AND (NOT p.uncancelled_only OR NOT r.cancel_requested)
    RETURNING r.*
),
attempt_started AS (
    INSERT INTO reliable_attempts (attempt_id, job_id, attempt, lease_id, worker_id, started_at,
                                   checkpoint_version_start)
    SELECT j.attempt_id, j.job_id, j.attempt, j.lease_id, j.worker_id, j.started_at, j.checkpoint_version
    FROM j, p WHERE p.claim
),
attempt_ended AS (
    UPDATE reliable_attempts AS a SET ended_at = p.now, outcome = p.event, error_class = p.error_class,
        error_type = p.error_type, error_message = p.error_message
    FROM p
    WHERE p.end_attempt AND a.attempt_id = (SELECT attempt_id FROM j) AND a.ended_at IS NULL
),
e AS (
    INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
        lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
        retry_count, checkpoint, operator, reason, host, detail)
    SELECT j.job_id, p.now, p.event, CASE WHEN p.transition THEN j.previous_status ELSE j.status END,
        j.status, j.version, j.attempt, j.attempt_id, coalesce(p.event_lease_id, j.lease_id),
        coalesce(p.event_worker_id, CASE WHEN p.operator IS NULL THEN j.worker_id END),
        j.queue, j.actor, j.workflow_id, j.trace_id, p.error_class, p.error_type, p.error_message,
        j.retry_count, j.checkpoint, p.operator, p.reason, p.host, p.detail
    FROM j, p
    RETURNING *
)
SELECT j.*, e.* FROM j, e;

-- name: enqueued_events
-- The `enqueued` event of each newly registered job (registration inserts the rows first).
INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
    lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
    retry_count, checkpoint, operator, reason, host, detail)
SELECT j.job_id, j.created_at, 'enqueued', NULL, j.status, j.version, j.attempt, j.attempt_id, j.lease_id,
    NULL, j.queue, j.actor, j.workflow_id, j.trace_id, NULL, NULL, NULL, j.retry_count, j.checkpoint, NULL,
    NULL, NULL, n.detail
FROM reliable_jobs AS j
JOIN unnest(%(job_ids)s::text[], %(details)s::text[]) WITH ORDINALITY AS n(job_id, detail, position)
  ON n.job_id = j.job_id
ORDER BY n.position
RETURNING *;

-- name: insert_job
-- Register one PENDING job; no row when the job_id exists already.
INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, retry_count,
    scheduled_at, dispatched_at, owner, workflow_id, trace_id, parent_job_id, checkpoint_schema,
    checkpoint_version, pause_requested, stop_requested, cancel_requested, created_at, updated_at)
VALUES (%(job_id)s, %(queue)s, %(actor)s, %(message)s, %(status)s::text, 1, 0, 0, 0, %(now)s + %(delay)s::float8,
    %(now)s, %(owner)s, %(workflow_id)s, %(trace_id)s, %(parent_job_id)s, %(checkpoint_schema)s::int4, 0,
    FALSE, FALSE, FALSE, %(now)s, %(now)s)
ON CONFLICT (job_id) DO NOTHING
RETURNING job_id;

-- name: now
SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8);

-- name: renew
-- The heartbeat: extend every lease the process holds in one statement; the leases still held.
-- It also stamps the liveness row: a beat that finds the last one (of any process) older than a
-- lease TTL marks the end of an outage (recovery then holds lease expiry for a TTL).
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
beat AS (
    INSERT INTO reliable_liveness AS l (id, last_beat_at) SELECT 1, t.now FROM t
    ON CONFLICT (id) DO UPDATE SET
        outage_ended_at = CASE WHEN excluded.last_beat_at - l.last_beat_at > %(lease_ttl)s::float8
                               THEN excluded.last_beat_at ELSE l.outage_ended_at END,
        last_beat_at = excluded.last_beat_at
)
UPDATE reliable_jobs
SET lease_expires_at = (SELECT now FROM t) + %(lease_ttl)s::float8, worker_id = %(worker_id)s::text
WHERE (job_id, lease_id) IN (SELECT * FROM unnest(%(job_ids)s::text[], %(lease_ids)s::int8[]))
  AND status = ANY(%(active)s::text[])
RETURNING job_id, lease_id, status, pause_requested, stop_requested, cancel_requested, lease_expires_at,
    stop_requested_at;

-- name: outage_ended_at
SELECT outage_ended_at FROM reliable_liveness WHERE id = 1;

-- name: holds_lease
SELECT 1 FROM reliable_jobs
WHERE job_id = %(job_id)s AND lease_id = %(lease_id)s::int8 AND status = ANY(%(active)s::text[])
FOR UPDATE;

-- name: insert_effect
INSERT INTO reliable_effects (job_id, op_key, attempt_id, lease_id, applied_at, result, duplicates)
VALUES (%(job_id)s, %(op_key)s, %(attempt_id)s, %(lease_id)s::int8,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(result)s::text, 0)
ON CONFLICT (job_id, op_key) DO NOTHING
RETURNING op_key;

-- name: count_duplicate_effect
UPDATE reliable_effects
SET duplicates = duplicates + 1,
    last_duplicate_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE job_id = %(job_id)s AND op_key = %(op_key)s
RETURNING duplicates, attempt_id;

-- name: mark_dispatched
-- The sweeper's compare-and-set on dispatched_at: only one of several sweepers publishes.
UPDATE reliable_jobs
SET dispatched_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE job_id = %(job_id)s AND status = %(status)s::text AND version = %(version)s::int8
  AND dispatched_at IS NOT DISTINCT FROM %(dispatched_at)s::float8
RETURNING job_id;

-- name: event_details
SELECT detail FROM reliable_job_events WHERE job_id = %(job_id)s AND event = %(event)s ORDER BY id;
