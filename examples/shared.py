"""The broker and reliable setup shared by export_job.py, payment_job.py and http_job.py.

One module creates the broker so that one worker can run every example:

    .venv/bin/dramatiq examples.export_job examples.payment_job examples.http_job -p 1 -t 4

Environment:
  BROKER_URL       RabbitMQ URL (default amqp://guest:guest@127.0.0.1:5672/); stub:// for an
                   in-process StubBroker (tests)
  RELIABLE_STORE   state store URL (default sqlite:///reliable.db here; the `reliable` command has
                   no default, so export it; create the store with `.venv/bin/reliable db upgrade`)
  API_URL          the HTTP API the payment and HTTP jobs call (default http://127.0.0.1:8099, where
                   `.venv/bin/python -m examples.fake_api` serves a fake one)
"""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
import httpx
import reliable
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.stub import StubBroker

BROKER_URL = os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/")
STORE_URL = os.environ.get("RELIABLE_STORE", "sqlite:///reliable.db")
POLICIES = Path(__file__).with_name("policies")  # examples/policies/: contracts and error rules

broker = StubBroker() if BROKER_URL == "stub://" else RabbitmqBroker(url=BROKER_URL)
RELIABLE = reliable.install(broker, store=STORE_URL, policies=POLICIES)
dramatiq.set_broker(broker)

#: The HTTP client of the payment and HTTP examples (tests swap in one on an httpx.MockTransport).
client = httpx.Client(base_url=os.environ.get("API_URL", "http://127.0.0.1:8099"), timeout=10.0)
