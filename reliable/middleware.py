"""The public import path of `ReliableMiddleware` (it lives in `reliable.worker`)."""

from .worker.middleware import ReliableMiddleware
from .worker.registration import REGISTERED

__all__ = ["REGISTERED", "ReliableMiddleware"]
