"""Run inside a subprocess (Django settings are per process): set up Django, send jobs, work them."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")

import django

django.setup()

import dramatiq  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django_dramatiq.models import Task  # noqa: E402
from dramatiq import Worker  # noqa: E402
from shop import tasks  # noqa: E402

import reliable  # noqa: E402

call_command("migrate", verbosity=0)  # django_dramatiq's admin table
broker = dramatiq.get_broker()
store = reliable.StateStore(os.environ["RELIABLE_STORE"])
messages = [tasks.add.send(2, 3), tasks.reject.send("x")]
worker = Worker(broker, worker_threads=1, worker_timeout=50)  # one writer: Django on SQLite
worker.start()
broker.join("default", timeout=60_000, fail_fast=False)  # reject fails by design
worker.join()
worker.stop()
print(json.dumps({
    "middleware": [type(m).__name__ for m in broker.middleware],
    "jobs": {m.actor_name: store.get(m.message_id).status.value for m in messages},
    "admin_tasks": sorted(t.status for t in Task.tasks.all()),
}))
