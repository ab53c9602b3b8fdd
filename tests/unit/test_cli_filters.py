"""Every option of the CLI that filters takes several values (repeated: a job matches any of them),
so `--actor a --actor b` never silently keeps only `b`. The test walks the whole command tree."""

from __future__ import annotations

import click
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.states import Event
from reliable.store import NewJob, StateStore

from support import cli_commands

#: The options that narrow what a command lists or acts on. `policy explain`'s --actor and --queue
#: describe the one failure to explain: they are not filters.
FILTERS = {"--queue", "--queues", "--actor", "--state", "--status", "--error-class", "--workflow", "--name",
           "--owner", "--event"}
NOT_FILTERS = {("policy", "explain")}


def test_every_filter_option_of_every_command_is_repeatable() -> None:
    seen, single = [], []
    for path, command in cli_commands():
        if path in NOT_FILTERS:
            continue
        for param in command.params:
            if isinstance(param, click.Option) and FILTERS & set(param.opts):
                seen.append((" ".join(path), param.opts[0]))
                if not param.multiple:
                    single.append(f"reliable {' '.join(path)} {param.opts[0]}")
    assert not single, f"filter options that keep only their last value: {single}"
    assert len(seen) > 40  # the walk found the commands (jobs, dlq, review, bulk commands, workflow, exporter...)


def test_repeated_filters_combine(sqlite_url: str) -> None:
    store = StateStore(sqlite_url)
    for job_id, actor in (("job-a", "a"), ("job-b", "b"), ("job-c", "c")):
        store.register(NewJob(job_id, queue="q", actor=actor, message={}))
        claim = store.claim(job_id, worker_id="w", lease_ttl=30)
        store.finish(job_id, claim.lease_id, Event.DEAD_LETTER)
    store.close()
    runner = CliRunner()
    for args in (["jobs", "list"], ["dlq", "list"]):
        done = runner.invoke(cli, [*args, "--store", sqlite_url, "--actor", "a", "--actor", "b", "--json"])
        assert done.exit_code == 0, done.output
        assert "job-a" in done.output and "job-b" in done.output and "job-c" not in done.output, args
    preview = runner.invoke(cli, ["retry", "--store", sqlite_url, "--actor", "a", "--actor", "c", "--state", "DEAD",
                                  "--dry-run", "--reason", "t"])
    assert "job-a" in preview.output and "job-c" in preview.output and "job-b" not in preview.output, preview.output
