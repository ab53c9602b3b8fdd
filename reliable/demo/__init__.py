"""`reliable demo`: the whole story of a reliable job system, told by real workers on a real store.

Modules: `config` (the demo's policy, alert rules and settings), `actors` (the scenario's jobs),
`app` (the entry point of real worker processes), `workers` (in-process or real worker pools),
`story` (what each job is expected to end as, checked against the store), `narrate` (events as
sentences), `alerting` (an alert rule evaluated over the demo store, its runbook rendered),
`view` (live or plain output) and `runner` (the director that plays the story).
Nothing here is imported by `reliable` itself, and nothing is imported before the command runs.
"""
