"""The environment variables the `reliable` command reads (below every other CLI module: no imports)."""

from __future__ import annotations

__all__ = ["ENV_API", "ENV_BROKER_DELIVERY_LIMIT", "ENV_BROKER_QUEUES", "ENV_TOKEN", "ENV_TOKEN_FILE"]

#: Where `--api` finds the API and its token (read by `open_source`; named in every --help that takes --api).
ENV_API = "RELIABLE_API"
#: How the application declares its queues: "classic" (Dramatiq's) or "quorum" (reliable.rabbitmq).
ENV_BROKER_QUEUES = "RELIABLE_BROKER_QUEUES"
#: The x-delivery-limit of the application's quorum queues (ReliableRabbitmqBroker's delivery_limit).
ENV_BROKER_DELIVERY_LIMIT = "RELIABLE_BROKER_DELIVERY_LIMIT"
#: The API token, or a file holding it (`--api`).
ENV_TOKEN = "RELIABLE_API_TOKEN"
ENV_TOKEN_FILE = "RELIABLE_API_TOKEN_FILE"
