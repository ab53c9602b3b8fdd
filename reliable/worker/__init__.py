"""Everything that runs inside a producer or worker process, for Dramatiq (docs/architecture.md).

`middleware` adapts Dramatiq's hooks and builds the steps once, each with the few collaborators
it uses (no step reads the middleware): `settings` (constructor options), `plans` (per actor),
`registration` (message -> job), `admission` (limits), `claim` (before the run), `fast` (the fast
path's start), `leases` (an attempt's id and lease), `attempt` (after the run, or a skip),
`outcome` (pure: how an attempt ended -> the event), `completion` (the fenced write),
`after_commit`, `runtime` and `boot` (per process: store, heartbeat, recovery thread), `context`
(what an actor sees).

Nothing is imported here: workflows, schedules and recovery import `registration` or `outcome`
without loading the middleware. The public names stay `reliable.ReliableMiddleware`,
`reliable.install`, `reliable.JobContext` and `reliable.current_job`.
"""
