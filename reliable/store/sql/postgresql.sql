-- The store's writes on PostgreSQL, one named query per entry ("-- name: NAME").
-- Parameters are psycopg's %(name)s, cast where a NULL would otherwise be ambiguous.
-- What each parameter means, and how a transition sets it, is reliable/store/writes.py.
-- A query a feature uses is a typed function of reliable/store/*_queries.py: its columns, by name
-- and in order, are the fields of its row type (tests/store/test_named_rows.py checks them).

-- name: write_job
-- One write to a job row (a transition, a checkpoint, or nothing) plus its event row, in ONE
-- statement. (A job's attempts are read from its events: reliable/store/job_history.py.)
-- Returns the job's columns (as schema.py orders them), then the event's own: its columns that are
-- not copies of the job's (sqlrunner.EVENT_OWN, in that order; the event's job_id, to_status,
-- version, attempt, attempt_id, queue, actor, workflow_id, trace_id, retry_count and checkpoint are
-- the job's, read from its columns: eleven fewer columns to send and decode per write). No row
-- when the guard did not match. A `slim` write (its caller uses only the event record: a submitted
-- success, StoreCore._submit) returns NULL for each job column that record does not take
-- (sqlrunner.SLIM_KEPT keeps the others): the message and 21 more neither sent nor decoded.
-- A claim's lease_id is at least the floor of the server's WAL timeline, (timeline - 1) << 40:
-- a promoted standby runs on a new timeline, so a fencing token it issues is above every token of
-- the old primary, including one whose claim was lost with unreplicated WAL (a lossy failover
-- never reissues a token). Timeline 1 (a cluster never failed over) has floor 0: lease_id + 1.
-- (The timeline is the first 8 hex digits of the current WAL file's name.)
-- The database setting reliable.lease_floor (`reliable db raise-lease-floor`, read when a session
-- starts) adds to that floor: after pg_upgrade (timeline back to 1) or a promotion to a timeline
-- number already used, it puts new tokens above every token issued before.
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
j AS (
    UPDATE reliable_jobs AS r SET
        status = coalesce(%(to_status)s::text, r.status),
        queue = coalesce(%(route_queue)s::text, r.queue),
        previous_status = CASE WHEN %(transition)s::bool THEN r.status ELSE r.previous_status END,
        version = r.version + CASE WHEN %(transition)s::bool THEN 1 ELSE 0 END,
        lease_id = CASE WHEN %(claim)s::bool
                        THEN greatest(r.lease_id + 1,
                                      coalesce(nullif(current_setting('reliable.lease_floor', true), '')::int8, 0)
                                      + ((('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8 - 1) << 40))
                        ELSE r.lease_id END,
        attempt = r.attempt + CASE WHEN %(claim)s::bool THEN 1 WHEN %(unclaim)s::bool THEN -1 ELSE 0 END,
        attempt_id = CASE WHEN %(claim)s::bool THEN %(attempt_id)s::text ELSE r.attempt_id END,
        worker_id = CASE WHEN %(claim)s::bool THEN %(worker_id)s::text ELSE r.worker_id END,
        started_at = CASE WHEN %(claim)s::bool THEN t.now ELSE r.started_at END,
        lease_expires_at = CASE WHEN %(release)s::bool THEN NULL WHEN %(lease_ttl)s::float8 IS NOT NULL THEN t.now + %(lease_ttl)s::float8
                                ELSE r.lease_expires_at END,
        finished_at = CASE WHEN NOT %(transition)s::bool THEN r.finished_at WHEN %(at_rest)s::bool THEN t.now ELSE NULL END,
        retry_at = CASE WHEN NOT %(transition)s::bool THEN r.retry_at WHEN %(delay)s::float8 IS NOT NULL THEN t.now + %(delay)s::float8 END,
        scheduled_at = CASE WHEN %(schedule)s::bool THEN t.now + coalesce(%(delay)s::float8, 0) ELSE r.scheduled_at END,
        dispatched_at = CASE %(dispatch)s::text WHEN 'now' THEN t.now WHEN 'clear' THEN NULL ELSE r.dispatched_at END,
        retry_count = CASE %(retries)s::text WHEN 'count' THEN r.retry_count + 1 WHEN 'reset' THEN 0
                      ELSE r.retry_count END,
        pause_requested = NOT %(release)s::bool AND (r.pause_requested OR %(request_pause)s::bool),
        stop_requested = NOT %(release)s::bool AND (r.stop_requested OR %(request_stop)s::bool),
        cancel_requested = NOT %(release)s::bool AND (r.cancel_requested OR %(request_cancel)s::bool),
        stop_requested_at = CASE WHEN %(release)s::bool THEN NULL
                                 WHEN %(request_stop)s::bool OR %(request_cancel)s::bool THEN coalesce(r.stop_requested_at, t.now)
                                 ELSE r.stop_requested_at END,
        checkpoint = CASE %(checkpoint_op)s::text WHEN 'save' THEN %(checkpoint)s::text WHEN 'clear' THEN NULL
                     ELSE r.checkpoint END,
        checkpoint_version = r.checkpoint_version + CASE WHEN %(checkpoint_op)s::text = 'save' THEN 1 ELSE 0 END,
        checkpoint_at = CASE %(checkpoint_op)s::text WHEN 'save' THEN t.now WHEN 'clear' THEN NULL
                        ELSE r.checkpoint_at END,
        checkpoint_schema = coalesce(%(checkpoint_schema)s::int4, r.checkpoint_schema),
        last_error_class = CASE WHEN %(has_error)s::bool THEN %(error_class)s::text ELSE r.last_error_class END,
        last_error_type = CASE WHEN %(has_error)s::bool THEN %(error_type)s::text ELSE r.last_error_type END,
        last_error_message = CASE WHEN %(has_error)s::bool THEN %(error_message)s::text ELSE r.last_error_message END,
        updated_at = CASE WHEN %(transition)s::bool OR %(checkpoint_op)s::text = 'save' THEN t.now ELSE r.updated_at END
    FROM t
    WHERE r.job_id = %(job_id)s
      -- `|| ''`: the guard must not let the planner serve the lookup from a partial index
      -- (migration 0007) instead of the primary key (measured: 2.5x the CPU of a claim).
      AND (%(sources)s::text[] IS NULL OR (r.status || '') = ANY(%(sources)s::text[]))
      AND (%(lease_id)s::int8 IS NULL OR r.lease_id = %(lease_id)s::int8)
      AND (%(version)s::int8 IS NULL OR r.version = %(version)s::int8)
      AND (NOT %(expired_only)s::bool OR r.lease_expires_at < t.now)
      AND (NOT %(due_only)s::bool OR r.retry_at IS NULL OR r.retry_at <= t.now)
      AND (NOT %(unpaused_only)s::bool OR NOT r.pause_requested)
      AND (NOT %(uncancelled_only)s::bool OR NOT r.cancel_requested)
      -- A claim by a delivery that is not the job's own message (reliable.delivery_digest).
      AND (%(delivery_digest)s::text IS NULL OR r.delivery_digest IS NULL OR r.delivery_digest = %(delivery_digest)s::text)
    RETURNING r.*, %(slim)s::bool AS slim
),
e AS (
    INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
        lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
        retry_count, checkpoint, operator, reason, host, detail, traceback)
    SELECT j.job_id, (SELECT now FROM t), %(event)s::text, CASE WHEN %(transition)s::bool THEN j.previous_status ELSE j.status END,
        j.status, j.version, j.attempt, j.attempt_id, coalesce(%(event_lease_id)s::int8, j.lease_id),
        coalesce(%(event_worker_id)s::text, CASE WHEN %(operator)s::text IS NULL THEN j.worker_id END),
        j.queue, j.actor, j.workflow_id, j.trace_id, %(error_class)s::text, %(error_type)s::text, %(error_message)s::text,
        j.retry_count, j.checkpoint, %(operator)s::text, %(reason)s::text, %(host)s::text, %(detail)s::text,
        %(traceback)s::text
    FROM j
    RETURNING id, at, event, from_status, lease_id, worker_id, error_class, error_type, error_message, operator,
        reason, host, detail, traceback, job_id
)
SELECT j.job_id, j.queue, j.actor, CASE WHEN j.slim THEN NULL ELSE j.message END AS message, j.status,
    CASE WHEN j.slim THEN NULL ELSE j.previous_status END AS previous_status, j.version,
    CASE WHEN j.slim THEN NULL ELSE j.lease_id END AS lease_id,
    CASE WHEN j.slim THEN NULL ELSE j.worker_id END AS worker_id,
    CASE WHEN j.slim THEN NULL ELSE j.lease_expires_at END AS lease_expires_at, j.attempt, j.attempt_id,
    j.started_at, CASE WHEN j.slim THEN NULL ELSE j.finished_at END AS finished_at, j.retry_count,
    CASE WHEN j.slim THEN NULL ELSE j.retry_at END AS retry_at, j.scheduled_at, j.dispatched_at,
    CASE WHEN j.slim THEN NULL ELSE j.pause_requested END AS pause_requested,
    CASE WHEN j.slim THEN NULL ELSE j.stop_requested END AS stop_requested,
    CASE WHEN j.slim THEN NULL ELSE j.cancel_requested END AS cancel_requested,
    CASE WHEN j.slim THEN NULL ELSE j.stop_requested_at END AS stop_requested_at, j.checkpoint,
    CASE WHEN j.slim THEN NULL ELSE j.checkpoint_version END AS checkpoint_version,
    CASE WHEN j.slim THEN NULL ELSE j.checkpoint_schema END AS checkpoint_schema,
    CASE WHEN j.slim THEN NULL ELSE j.checkpoint_at END AS checkpoint_at,
    CASE WHEN j.slim THEN NULL ELSE j.owner END AS owner, j.workflow_id, j.trace_id,
    CASE WHEN j.slim THEN NULL ELSE j.parent_job_id END AS parent_job_id,
    CASE WHEN j.slim THEN NULL ELSE j.last_error_class END AS last_error_class,
    CASE WHEN j.slim THEN NULL ELSE j.last_error_type END AS last_error_type,
    CASE WHEN j.slim THEN NULL ELSE j.last_error_message END AS last_error_message,
    CASE WHEN j.slim THEN NULL ELSE j.created_at END AS created_at,
    CASE WHEN j.slim THEN NULL ELSE j.updated_at END AS updated_at,
    CASE WHEN j.slim THEN NULL ELSE j.delivery_digest END AS delivery_digest,
    e.id, e.at, e.event, e.from_status, e.lease_id, e.worker_id, e.error_class, e.error_type, e.error_message,
    e.operator, e.reason, e.host, e.detail, e.traceback
FROM j, e;

-- name: register_jobs
-- Register PENDING jobs with their `enqueued` events in ONE statement: the sends of a process that
-- wait together (their group commit, reliable/store/batching.py), enqueue_many, and the jobs
-- registered inside another write's transaction. `rows` is a JSON array, one object per job (a
-- job once). No round trip for the time: the store's clock is read inside the statement (the
-- database's, or the injected `now`). A job_id that exists is left alone: it gets no event.
-- One row per job of `rows`, in no set order: its id; its event's id and time (NULL: it existed);
-- for one that existed, its registered actor and delivery digest (NULL too when another transaction
-- registered it after this statement began: the caller reads them again) so that a re-send is
-- compared without another statement; the synchronous_commit this statement commits with.
-- The event's other columns are the row's as sent, or constants (a new job's version 1, attempt 0,
-- lease 0, no retries, no checkpoint): the caller fills them in (sqlrunner._enqueued_event), not
-- read back (6 columns returned instead of 29 per job; docs/performance.md).
-- `synchronous_commit` ('off': the commit does not wait for its WAL flush; NULL: the session's
-- own) is set for this statement's transaction only (set_config's is_local): nothing stays on the
-- connection, as PgBouncer's transaction pooling needs. The jobs are inserted in job_id order, so
-- two batches over the same ids wait for each other without a cycle. The existing row is looked up
-- only for a job that got no event (a re-send: rare), by primary key.
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now,
           set_config('synchronous_commit',
                      coalesce(%(synchronous_commit)s::text, current_setting('synchronous_commit')), true)
               AS commit_mode
),
p AS (
    SELECT * FROM json_to_recordset(%(rows)s::json) AS x(job_id text, queue text, actor text, message text,
        status text, delay float8, owner text, workflow_id text, trace_id text, parent_job_id text,
        checkpoint_schema int4, delivery_digest text, detail text)
),
j AS (
    INSERT INTO reliable_jobs (job_id, queue, actor, message, status, version, lease_id, attempt, retry_count,
        scheduled_at, dispatched_at, owner, workflow_id, trace_id, parent_job_id, checkpoint_schema,
        checkpoint_version, pause_requested, stop_requested, cancel_requested, created_at, updated_at,
        delivery_digest)
    SELECT p.job_id, p.queue, p.actor, p.message, p.status, 1, 0, 0, 0, t.now + p.delay, t.now, p.owner,
        p.workflow_id, p.trace_id, p.parent_job_id, p.checkpoint_schema, 0, FALSE, FALSE, FALSE, t.now, t.now,
        p.delivery_digest
    FROM p, t
    ORDER BY p.job_id
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, created_at, status, queue, actor, workflow_id, trace_id
),
e AS (
    INSERT INTO reliable_job_events (job_id, at, event, from_status, to_status, version, attempt, attempt_id,
        lease_id, worker_id, queue, actor, workflow_id, trace_id, error_class, error_type, error_message,
        retry_count, checkpoint, operator, reason, host, detail, traceback)
    SELECT j.job_id, j.created_at, 'enqueued', NULL, j.status, 1, 0, NULL, 0, NULL, j.queue, j.actor,
        j.workflow_id, j.trace_id, NULL, NULL, NULL, 0, NULL, NULL, NULL, NULL, p.detail, NULL
    FROM j JOIN p ON p.job_id = j.job_id
    ORDER BY j.job_id
    RETURNING id, job_id, at
)
SELECT p.job_id, e.id, e.at,
    CASE WHEN e.id IS NULL THEN (SELECT r.actor FROM reliable_jobs AS r WHERE r.job_id = p.job_id) END,
    CASE WHEN e.id IS NULL THEN (SELECT r.delivery_digest FROM reliable_jobs AS r WHERE r.job_id = p.job_id) END,
    t.commit_mode
FROM p CROSS JOIN t LEFT JOIN e ON e.job_id = p.job_id;

-- name: registered_digests
-- What the jobs a registration found existing were registered with (a re-send is compared).
SELECT job_id, actor, delivery_digest FROM reliable_jobs WHERE job_id = ANY(%(job_ids)s::text[]);

-- name: server_timeline
-- The WAL timeline of a primary (as write_job computes a claim's floor), NULL on a standby; and
-- the cluster's system identifier (a standby shares its primary's; pg_upgrade makes a new one).
SELECT CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8 END,
       (SELECT system_identifier FROM pg_control_system());

-- name: session_settings
-- At each new connection (reliable/store/sessions.py): reliable's marker setting (NULL when a pooler
-- dropped the startup options that carry it), the session's two bounds in milliseconds (0: none), and
-- its role and database, to name in the fix.
SELECT current_setting(%(marker)s, true),
       (SELECT setting::int8 FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout'),
       (SELECT setting::int8 FROM pg_settings WHERE name = 'statement_timeout'),
       current_user::text, current_database()::text;

-- name: lease_floor_state
-- What `reliable db raise-lease-floor` decides from: the database, whether the server is a
-- standby, its timeline, the highest token in the store and the database's reliable.lease_floor.
SELECT current_database(), pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN NULL
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8 END,
       (SELECT coalesce(max(lease_id), 0) FROM reliable_jobs),
       coalesce((SELECT max(split_part(setting, '=', 2)::int8)
                 FROM pg_db_role_setting s, unnest(s.setconfig) AS setting
                 WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
                   AND s.setrole = 0 AND starts_with(setting, 'reliable.lease_floor=')), 0);

-- name: now
SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8);

-- name: renew
-- The heartbeat: extend every lease the process holds in one statement; the leases still held.
-- It also stamps the liveness row: a beat that finds the last one (of any process) older than a
-- lease TTL marks the end of an outage (recovery then holds lease expiry for a TTL), and the
-- process's own row in reliable_worker_processes: no extra round trip per beat.
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
beat AS (
    INSERT INTO reliable_liveness AS l (id, last_beat_at) SELECT 1, t.now FROM t
    ON CONFLICT (id) DO UPDATE SET
        outage_ended_at = CASE WHEN excluded.last_beat_at - l.last_beat_at > %(lease_ttl)s::float8
                               THEN excluded.last_beat_at ELSE l.outage_ended_at END,
        last_beat_at = excluded.last_beat_at
),
proc AS (
    UPDATE reliable_worker_processes SET last_beat_at = (SELECT now FROM t) WHERE worker_id = %(worker_id)s::text
)
UPDATE reliable_jobs
SET lease_expires_at = (SELECT now FROM t) + %(lease_ttl)s::float8, worker_id = %(worker_id)s::text
WHERE (job_id, lease_id) IN (SELECT * FROM unnest(%(job_ids)s::text[], %(lease_ids)s::int8[]))
  AND status = ANY(%(active)s::text[])
RETURNING job_id, lease_id, status, pause_requested, stop_requested, cancel_requested, lease_expires_at,
    stop_requested_at;

-- name: process_beat
-- A heartbeat holding no lease: it stamps the process's own record only.
UPDATE reliable_worker_processes
SET last_beat_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE worker_id = %(worker_id)s::text;

-- name: job_status
-- The fast path's look before a run: the state and the delivery digest, by primary key.
SELECT status, delivery_digest FROM reliable_jobs WHERE job_id = %(job_id)s;

-- name: job_ids_by_prefix
-- The ids starting with %(prefix)s, smallest first: a range on the primary key, then the exact
-- test. Right when the database's collation orders ids by their characters (C, POSIX, C.UTF-8);
-- otherwise migration 0008 made an index for job_ids_by_prefix_c (SqlRunner picks).
SELECT job_id FROM reliable_jobs
WHERE job_id >= %(prefix)s::text AND job_id < %(prefix_end)s::text AND starts_with(job_id, %(prefix)s::text)
ORDER BY job_id LIMIT %(limit)s::int8;

-- name: job_ids_by_prefix_c
-- The same in character order (COLLATE "C"), for a linguistic collation: it sorts ':' '[' '{'
-- before digits and letters, so its range would miss ids. Served by ix_reliable_jobs_job_id_c.
SELECT job_id FROM reliable_jobs
WHERE job_id COLLATE "C" >= %(prefix)s::text AND job_id COLLATE "C" < %(prefix_end)s::text
  AND starts_with(job_id, %(prefix)s::text)
ORDER BY job_id COLLATE "C" LIMIT %(limit)s::int8;

-- name: has_index
SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = %(name)s::text;

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

-- name: create_barrier
INSERT INTO reliable_barriers (barrier_id, parties, remaining, created_at)
VALUES (%(barrier_id)s, %(parties)s::int4, %(parties)s::int4,
        coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
ON CONFLICT (barrier_id) DO NOTHING
RETURNING barrier_id;

-- name: arrive_at_barrier
-- One member arrived (in the transaction committing its success): how many are still awaited.
UPDATE reliable_barriers SET remaining = remaining - 1
WHERE barrier_id = %(barrier_id)s AND remaining > 0
RETURNING remaining;

-- Workflows (reliable/store/workflows.py): every write runs in one transaction holding the
-- workflow's row lock (lock_workflow), so two nodes finishing at once cannot both miss, or both
-- start, the node waiting for them.

-- name: lock_workflow
SELECT workflow_id, name, status, hold, run FROM reliable_workflows
WHERE workflow_id = %(workflow_id)s FOR UPDATE;

-- name: workflow_nodes
SELECT n.node, n.job_id, j.status, n.trigger, n.on_upstream_failure, n.pass_results,
       n.result IS NULL AND n.result_note IS NOT NULL, n.digest
FROM reliable_workflow_nodes n LEFT JOIN reliable_jobs j ON j.job_id = n.job_id
WHERE n.workflow_id = %(workflow_id)s ORDER BY n.position;

-- name: workflow_edges
SELECT parent, child FROM reliable_workflow_edges WHERE workflow_id = %(workflow_id)s ORDER BY child, position;

-- name: workflow_node_messages
SELECT node, message, owner, checkpoint_schema, queue, actor, job_id, result
FROM reliable_workflow_nodes WHERE workflow_id = %(workflow_id)s;

-- name: insert_workflow
INSERT INTO reliable_workflows (workflow_id, name, status, hold, run, owner, created_by, created_at, updated_at,
    checked_at)
VALUES (%(workflow_id)s, %(name)s, %(status)s::text, NULL, 1, %(owner)s, %(created_by)s, %(now)s::float8,
    %(now)s::float8, %(now)s::float8);

-- name: insert_workflow_node
INSERT INTO reliable_workflow_nodes (workflow_id, node, position, actor, queue, message, owner, checkpoint_schema,
    code_version, digest, trigger, on_upstream_failure, pass_results, job_id, run)
VALUES (%(workflow_id)s, %(node)s, %(position)s::int4, %(actor)s, %(queue)s, %(message)s, %(owner)s,
    %(checkpoint_schema)s::int4, %(code_version)s, %(digest)s, %(trigger)s, %(on_upstream_failure)s,
    %(pass_results)s::boolean, %(job_id)s, 1);

-- name: insert_workflow_edge
INSERT INTO reliable_workflow_edges (workflow_id, parent, child, position)
VALUES (%(workflow_id)s, %(parent)s, %(child)s, %(position)s::int4);

-- name: insert_workflow_event
INSERT INTO reliable_workflow_events (workflow_id, at, event, from_status, to_status, run, operator, source, reason,
    detail)
VALUES (%(workflow_id)s, %(now)s::float8, %(event)s, %(from_status)s, %(to_status)s, %(run)s::int4, %(operator)s,
    %(source)s, %(reason)s, %(detail)s);

-- name: update_workflow
UPDATE reliable_workflows
SET status = %(status)s::text, hold = %(hold)s, run = %(run)s::int4, checked_at = %(now)s::float8,
    updated_at = CASE WHEN status = %(status)s::text THEN updated_at ELSE %(now)s::float8 END,
    finished_at = CASE WHEN %(final)s::boolean THEN coalesce(finished_at, %(now)s::float8) ELSE NULL END
WHERE workflow_id = %(workflow_id)s;

-- name: assign_workflow_node
-- A new run of a node: a new job id, its result cleared (and, for changed inputs, a new message).
UPDATE reliable_workflow_nodes
SET job_id = %(job_id)s, run = %(run)s::int4, result = NULL, result_note = NULL,
    message = coalesce(%(message)s, message), digest = coalesce(%(digest)s, digest),
    code_version = CASE WHEN %(message)s::text IS NULL THEN code_version ELSE %(code_version)s END
WHERE workflow_id = %(workflow_id)s AND node = %(node)s;

-- name: save_node_result
-- A node's result, in the transaction that commits its job's success.
UPDATE reliable_workflow_nodes SET result = %(result)s, result_note = %(result_note)s WHERE job_id = %(job_id)s;

-- Schedules (reliable/schedules/storage.py). A schedule's writes run in one transaction that
-- locks its row first (lock_schedule): schedulers of one schedule take turns, each deciding from
-- what the last one wrote, and always in the same lock order (schedule row, then slot rows).

-- name: lock_schedule
-- Also the transaction's time, which every later statement of it uses (one round trip fewer).
SELECT name, definition, template, paused, decided_until, next_slot, last_slot,
    coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now, slot_key
FROM reliable_schedules WHERE name = %(name)s
FOR UPDATE;

-- name: insert_schedule
-- A schedule declared for the first time; no row when it exists.
INSERT INTO reliable_schedules (name, actor, queue, definition, template, paused, decided_until, next_slot,
    last_slot, created_at, updated_at)
SELECT %(name)s, %(actor)s, %(queue)s, %(definition)s, %(template)s, %(paused)s::bool,
    coalesce(%(decided_until)s::float8, t.now), %(next_slot)s::float8, NULL, t.now, t.now
FROM (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) t
ON CONFLICT (name) DO NOTHING
RETURNING decided_until;

-- name: redeclare_schedule
-- A new declaration of a known schedule: its runtime state (paused, decided_until, last_slot) stays.
UPDATE reliable_schedules SET actor = %(actor)s, queue = %(queue)s, definition = %(definition)s,
    template = %(template)s, next_slot = %(next_slot)s::float8,
    updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE name = %(name)s;

-- name: decide_schedule
-- Slots decided up to :decided_until (fired or dropped), under the row lock_schedule holds.
UPDATE reliable_schedules SET decided_until = %(decided_until)s::float8, next_slot = %(next_slot)s::float8,
    last_slot = coalesce(%(last_slot)s::float8, last_slot),
    updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE name = %(name)s;

-- name: set_schedule_paused
UPDATE reliable_schedules SET paused = %(paused)s::bool,
    decided_until = coalesce(%(decided_until)s::float8, decided_until),
    next_slot = coalesce(%(next_slot)s::float8, next_slot),
    updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE name = %(name)s;

-- name: insert_schedule_slot
-- A slot fires once: no row when it fired already.
INSERT INTO reliable_schedule_slots (schedule, slot_at, job_id, kind, fired_at)
VALUES (%(schedule)s, %(slot_at)s::float8, %(job_id)s, %(kind)s,
    coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8))
ON CONFLICT (schedule, slot_at) DO NOTHING
RETURNING job_id;

-- name: set_schedule_slot_key
-- The secret a schedule's slot job ids are derived from, set once by the first decision that needs
-- it, under the row lock_schedule holds (so two schedulers never pick two keys).
UPDATE reliable_schedules SET slot_key = %(slot_key)s WHERE name = %(name)s AND slot_key IS NULL;

-- name: schedule_slot_conflict
-- A slot whose job id another job holds (other content): the slot is not fired, the schedule counts it.
UPDATE reliable_schedules SET slot_conflicts = slot_conflicts + 1 WHERE name = %(name)s;

-- name: unfire_schedule_slot
-- The slot row insert_schedule_slot just wrote, taken back (its job id was taken: a conflict).
DELETE FROM reliable_schedule_slots WHERE schedule = %(schedule)s AND slot_at = %(slot_at)s::float8;

-- name: schedule_event
INSERT INTO reliable_schedule_events (schedule, at, event, operator, reason, host, detail)
VALUES (%(schedule)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(event)s,
    %(operator)s, %(reason)s, %(host)s, %(detail)s)
RETURNING at;

-- name: due_schedules
-- Every scheduler's tick: the schedules not paused whose next slot is due at :at (one round trip).
SELECT name FROM reliable_schedules WHERE NOT paused AND next_slot <= %(at)s::float8 ORDER BY next_slot, name;

-- name: delete_schedule
-- An operator removed the schedule (audited first); its fired slots stay as history.
DELETE FROM reliable_schedules WHERE name = %(name)s;

-- The schedules' reads (`reliable schedules list/show`, the console), here so that no module outside
-- reliable/store/ writes SQL over reliable's tables. Columns: schedule_queries.StoredSchedule's fields.

-- name: list_schedules
SELECT name, actor, queue, definition, template, paused, decided_until, next_slot, last_slot, created_at, updated_at
FROM reliable_schedules ORDER BY name;

-- name: get_schedule
SELECT name, actor, queue, definition, template, paused, decided_until, next_slot, last_slot, created_at, updated_at
FROM reliable_schedules WHERE name = %(name)s;

-- name: list_schedule_slots
-- A schedule's latest fired slots with their jobs' states (NULL: the job is gone), newest first.
SELECT s.schedule, s.slot_at, s.job_id, s.kind, s.fired_at, j.status
FROM reliable_schedule_slots s LEFT JOIN reliable_jobs j ON j.job_id = s.job_id
WHERE s.schedule = %(name)s ORDER BY s.slot_at DESC LIMIT %(limit)s::int8;

-- name: list_schedule_events
-- A schedule's latest audit entries, newest first (the caller shows them oldest first).
SELECT id, schedule, at, event, operator, reason, host, detail FROM reliable_schedule_events
WHERE schedule = %(name)s ORDER BY id DESC LIMIT %(limit)s::int8;

-- name: count_schedule_slots
-- How many slots each schedule fired: every schedule when :names is NULL, else those named.
SELECT schedule, count(*) AS fired FROM reliable_schedule_slots
WHERE %(names)s::text[] IS NULL OR schedule = ANY(%(names)s::text[])
GROUP BY schedule;

-- Limits (reliable/limits/storage.py). A concurrency limit of N is N slot rows per (actor, key), a
-- rate limit K token buckets: a worker takes ONE free row it can lock (SKIP LOCKED), so a fleet
-- does not queue on one hot row. A slot is held by a job's attempt (holder_job, holder_lease: the
-- lease id the claim gives it) while that lease is live by the database clock, or until
-- expires_at (the window between taking it and the claim): a killed worker's slot frees itself.

-- name: limit_ensure
-- The actor's limit row (declared concurrency; 0 for a rate limit only). A new declaration keeps
-- a reduction in force, clamped to the new declaration and to an operator's ceiling (migration 0023).
INSERT INTO reliable_limits AS l (name, declared, effective, streak, updated_at)
SELECT %(name)s::text, %(declared)s::int4, %(declared)s::int4, 0, t.now
FROM (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) t
ON CONFLICT (name) DO UPDATE SET
    effective = least(CASE WHEN l.effective >= l.declared THEN excluded.declared
                           ELSE least(l.effective, excluded.declared) END, coalesce(l.ceiling, excluded.declared)),
    declared = excluded.declared, updated_at = excluded.updated_at
WHERE l.declared <> excluded.declared;

-- name: limit_ensure_slots
INSERT INTO reliable_limit_slots (name, key, slot)
SELECT %(name)s::text, %(key)s::text, n FROM generate_series(0, %(count)s::int4 - 1) AS n
ON CONFLICT (name, key, slot) DO NOTHING;

-- name: limit_ensure_buckets
INSERT INTO reliable_limit_buckets (name, key, bucket, tokens, updated_at)
SELECT %(name)s::text, %(key)s::text, n, %(capacity)s::float8,
    coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
FROM generate_series(0, %(count)s::int4 - 1) AS n
ON CONFLICT (name, key, bucket) DO NOTHING;

-- name: limit_acquire_slot
-- One statement: take the first free slot below the effective limit (in key order: the scan stops
-- there) and read the actor's limit row; no slot when all are held (or locked). A slot is free
-- once its attempt ended (the job left RUNNING/STOPPING or its lease moved on or expired): no
-- release is needed after an attempt, only when a taken slot's claim did not happen.
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
lim AS (
    -- `declared` as the adaptive restore reads it: capped by an operator's ceiling (reliable.limits.operator)
    SELECT least(declared, coalesce(ceiling, declared)) AS declared, effective, streak, last_rate_limited_at,
        changed_at FROM reliable_limits
    WHERE name = %(name)s::text
),
pick AS (
    SELECT s.slot FROM reliable_limit_slots s, t, lim
    WHERE s.name = %(name)s::text AND s.key = %(key)s::text AND s.slot < lim.effective
      AND (s.holder_job IS NULL OR NOT (
          -- taken, its claim not made yet, within the ttl
          (s.expires_at >= t.now AND NOT EXISTS (
              SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id >= s.holder_lease))
          -- or held by the live attempt of that claim
          OR EXISTS (
              SELECT 1 FROM reliable_jobs j
              WHERE j.job_id = s.holder_job AND j.lease_id = s.holder_lease
                AND j.status = ANY(%(active)s::text[]) AND j.lease_expires_at >= t.now)))
    ORDER BY s.slot
    LIMIT 1
    FOR UPDATE OF s SKIP LOCKED
),
took AS (
    UPDATE reliable_limit_slots s
    SET holder_job = %(job_id)s::text, expires_at = t.now + %(ttl)s::float8,
        holder_lease = (SELECT j.lease_id + 1 FROM reliable_jobs j WHERE j.job_id = %(job_id)s::text)
    FROM pick, t
    WHERE s.name = %(name)s::text AND s.key = %(key)s::text AND s.slot = pick.slot
    RETURNING s.slot, s.holder_lease
)
SELECT (SELECT slot FROM took) AS slot, (SELECT holder_lease FROM took) AS holder_lease, lim.declared, lim.effective, lim.streak,
    lim.last_rate_limited_at, lim.changed_at, t.now
FROM t LEFT JOIN lim ON TRUE;

-- name: limit_bind_slot
-- After a claim whose lease id differs from the one the slot expected (another delivery claimed first).
UPDATE reliable_limit_slots SET holder_lease = %(lease_id)s::int8
WHERE name = %(name)s::text AND key = %(key)s::text AND slot = %(slot)s::int4 AND holder_job = %(job_id)s::text
RETURNING slot;

-- name: limit_release_slot
UPDATE reliable_limit_slots SET holder_job = NULL, holder_lease = NULL, expires_at = NULL
WHERE name = %(name)s::text AND key = %(key)s::text AND slot = %(slot)s::int4 AND holder_job = %(job_id)s::text;

-- name: limit_mark_deferred
-- A deferred delivery comes back in :delay seconds: the sweeper counts from then.
UPDATE reliable_jobs
SET dispatched_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) + %(delay)s::float8
WHERE job_id = %(job_id)s::text AND status = 'PENDING';

-- name: limit_take_token
-- One statement: take a token from a bucket that has one (starting at :start); with or without
-- one, the most any bucket holds now (how long to wait for the next token).
WITH t AS (
    SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
),
pick AS (
    SELECT b.bucket FROM reliable_limit_buckets b, t
    WHERE b.name = %(name)s::text AND b.key = %(key)s::text AND b.bucket < %(shards)s::int4
      AND least(%(capacity)s::float8, b.tokens + (t.now - b.updated_at) * %(refill)s::float8) >= 1
    ORDER BY mod(b.bucket + %(start)s::int4, %(shards)s::int4)
    LIMIT 1
    FOR UPDATE OF b SKIP LOCKED
),
took AS (
    UPDATE reliable_limit_buckets b
    SET tokens = least(%(capacity)s::float8, b.tokens + (t.now - b.updated_at) * %(refill)s::float8) - 1,
        updated_at = t.now
    FROM pick, t
    WHERE b.name = %(name)s::text AND b.key = %(key)s::text AND b.bucket = pick.bucket
    RETURNING b.bucket
)
SELECT (SELECT bucket FROM took) AS bucket,
    (SELECT max(least(%(capacity)s::float8, b.tokens + (t.now - b.updated_at) * %(refill)s::float8))
     FROM reliable_limit_buckets b
     WHERE b.name = %(name)s::text AND b.key = %(key)s::text AND b.bucket < %(shards)s::int4) AS best,
    t.now
FROM t;

-- name: limit_lock
-- The actor's limit row, locked for an adaptive decision (rare: a rate-limited failure, a restore);
-- `declared` capped by an operator's ceiling, so a restore never goes above it.
SELECT least(declared, coalesce(ceiling, declared)) AS declared, effective, streak, last_rate_limited_at, changed_at,
    coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
FROM reliable_limits WHERE name = %(name)s::text
FOR UPDATE;

-- name: limit_update
UPDATE reliable_limits SET effective = %(effective)s::int4, streak = %(streak)s::int4,
    last_rate_limited_at = %(last_rate_limited_at)s::float8, changed_at = %(changed_at)s::float8,
    updated_at = coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8)
WHERE name = %(name)s::text;

-- name: limit_holders
-- The slots held now (a live lease, or taken and not yet claimed): the integration tests' and CLI's view.
SELECT s.key, s.slot, s.holder_job FROM reliable_limit_slots s,
    (SELECT coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now) t
WHERE s.name = %(name)s::text AND s.holder_job IS NOT NULL AND (
    (s.expires_at >= t.now AND NOT EXISTS (
        SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id >= s.holder_lease))
    OR EXISTS (
        SELECT 1 FROM reliable_jobs j WHERE j.job_id = s.holder_job AND j.lease_id = s.holder_lease
          AND j.status = ANY(%(active)s::text[]) AND j.lease_expires_at >= t.now))
ORDER BY s.key, s.slot;

-- Retention (reliable/store/retention.py): `reliable db prune`. A job is pruned when it finished
-- (:states, terminal states only) before :cut and it is no node of a workflow that is live or ended
-- after :cut. Each batch is one statement that locks its jobs with SKIP LOCKED: a row a worker or an
-- operator holds is left for a later run, and nothing a worker does waits for more than one batch.
-- One state per batch, oldest first, so the (status, updated_at) index serves it.

-- name: prune_count_jobs
WITH doomed AS (
    SELECT j.job_id FROM reliable_jobs j
    WHERE j.status = ANY(%(states)s::text[]) AND j.updated_at < %(cut)s::float8
      AND NOT EXISTS (SELECT 1 FROM reliable_workflows w WHERE w.workflow_id = j.workflow_id
                      AND NOT (w.status = ANY(%(workflow_final)s::text[]) AND w.finished_at < %(cut)s::float8))
)
SELECT (SELECT count(*) FROM doomed),
       (SELECT count(*) FROM reliable_job_events e JOIN doomed d ON e.job_id = d.job_id),
       (SELECT count(*) FROM reliable_job_events e JOIN doomed d ON e.job_id = d.job_id
        WHERE e.to_status = ANY(%(active)s::text[]) AND NOT coalesce(e.from_status = ANY(%(active)s::text[]), false)),
       (SELECT count(*) FROM reliable_effects f JOIN doomed d ON f.job_id = d.job_id);

-- name: prune_jobs
WITH doomed AS (
    SELECT j.job_id FROM reliable_jobs j
    WHERE j.status = %(state)s AND j.updated_at < %(cut)s::float8
      AND NOT EXISTS (SELECT 1 FROM reliable_workflows w WHERE w.workflow_id = j.workflow_id
                      AND NOT (w.status = ANY(%(workflow_final)s::text[]) AND w.finished_at < %(cut)s::float8))
    ORDER BY j.updated_at LIMIT %(batch)s::int4
    FOR UPDATE OF j SKIP LOCKED
), events AS (
    DELETE FROM reliable_job_events e USING doomed d WHERE e.job_id = d.job_id
    RETURNING e.to_status = ANY(%(active)s::text[]) AND NOT coalesce(e.from_status = ANY(%(active)s::text[]), false)
        AS claim
), effects AS (
    DELETE FROM reliable_effects f USING doomed d WHERE f.job_id = d.job_id RETURNING 1
), gone AS (
    DELETE FROM reliable_jobs j USING doomed d WHERE j.job_id = d.job_id RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM events), (SELECT count(*) FROM events WHERE claim),
       (SELECT count(*) FROM effects);

-- name: prune_count_workflows
-- Ended workflows (:workflow_final) that ended before :cut; their node jobs are pruned with the jobs.
SELECT count(*) FROM reliable_workflows
WHERE status = ANY(%(workflow_final)s::text[]) AND finished_at < %(cut)s::float8;

-- name: prune_workflows
-- Ended workflows none of whose jobs is left (a node job not at rest keeps its workflow).
WITH doomed AS (
    SELECT w.workflow_id FROM reliable_workflows w
    WHERE w.status = ANY(%(workflow_final)s::text[]) AND w.finished_at < %(cut)s::float8
      AND NOT EXISTS (SELECT 1 FROM reliable_jobs j WHERE j.workflow_id = w.workflow_id)
    LIMIT %(batch)s::int4
    FOR UPDATE OF w SKIP LOCKED
), nodes AS (
    DELETE FROM reliable_workflow_nodes n USING doomed d WHERE n.workflow_id = d.workflow_id RETURNING 1
), edges AS (
    DELETE FROM reliable_workflow_edges g USING doomed d WHERE g.workflow_id = d.workflow_id RETURNING 1
), events AS (
    DELETE FROM reliable_workflow_events e USING doomed d WHERE e.workflow_id = d.workflow_id RETURNING 1
), gone AS (
    DELETE FROM reliable_workflows w USING doomed d WHERE w.workflow_id = d.workflow_id RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM nodes) + (SELECT count(*) FROM edges)
       + (SELECT count(*) FROM events);

-- name: prune_count_operations
SELECT count(*) FROM reliable_operations
WHERE status = ANY(%(ended)s::text[]) AND coalesce(finished_at, created_at) < %(cut)s::float8;

-- name: prune_operations
WITH doomed AS (
    SELECT operation_id FROM reliable_operations
    WHERE status = ANY(%(ended)s::text[]) AND coalesce(finished_at, created_at) < %(cut)s::float8
    LIMIT %(batch)s::int4
    FOR UPDATE SKIP LOCKED
), gone AS (
    DELETE FROM reliable_operations o USING doomed d WHERE o.operation_id = d.operation_id RETURNING 1
)
SELECT count(*) FROM gone;

-- Queue pauses (reliable/queue_pauses.py). A row while the queue is paused; its audit trail beside.

-- name: pause_queue
-- No row when the queue is paused already (the first pause and its reason stay).
INSERT INTO reliable_queue_pauses (queue, paused_at, operator, host, source, reason)
VALUES (%(queue)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(operator)s,
    %(host)s, %(source)s, %(reason)s)
ON CONFLICT (queue) DO NOTHING
RETURNING paused_at;

-- name: resume_queue
-- No row when the queue was not paused.
DELETE FROM reliable_queue_pauses WHERE queue = %(queue)s RETURNING paused_at;

-- name: queue_event
INSERT INTO reliable_queue_events (queue, at, event, operator, host, source, reason, detail)
VALUES (%(queue)s, coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8), %(event)s,
    %(operator)s, %(host)s, %(source)s, %(reason)s, %(detail)s);

-- name: list_queue_pauses
-- Every paused queue with the database's time now (a worker's cache and the console's banner run it:
-- a handful of rows, no index needed beyond the primary key).
SELECT queue, paused_at, operator, host, source, reason,
    coalesce(%(now)s::float8, extract(epoch FROM clock_timestamp())::float8) AS now
FROM reliable_queue_pauses ORDER BY queue;

-- name: list_queue_events
-- A queue's latest audit entries, newest first.
SELECT id, queue, at, event, operator, host, source, reason, detail FROM reliable_queue_events
WHERE queue = %(queue)s ORDER BY id DESC LIMIT %(limit)s::int8;

-- name: job_statuses
-- The fast path's batched look (reliable.worker.waiting): the state and delivery digest of the
-- delivered job and of the fast-path messages waiting in the process, by primary key, in one read.
SELECT job_id, status, delivery_digest FROM reliable_jobs WHERE job_id = ANY(%(job_ids)s::text[]);
