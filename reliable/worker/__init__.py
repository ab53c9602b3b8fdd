"""Everything that runs inside a producer or worker process, for Dramatiq (docs/architecture.md).

`middleware` adapts Dramatiq's hooks; each step has its module: `settings` (constructor options),
`plans` (per actor), `registration` (message -> job), `admission` (limits), `claim`, `outcome`
(pure: how an attempt ended -> the event), `completion` (the fenced write), `after_commit`,
`runtime` and `boot` (per process: store, heartbeat, recovery thread), `context` (what an actor
sees), `state` (the Worker protocol the steps depend on).

Nothing is imported here: workflows, schedules and recovery import `registration` or `outcome`
without loading the middleware. The public names stay `reliable.ReliableMiddleware`,
`reliable.install`, `reliable.JobContext` and `reliable.current_job`.
"""
