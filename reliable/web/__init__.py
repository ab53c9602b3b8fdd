"""The HTTP API and web console (`pip install 'reliable[web]'`): `create_app`, `wsgi_app`, `WebConfig`."""

from __future__ import annotations

from .app import create_app, wsgi_app
from .config import WebConfig
from .state import WebState

__all__ = ["WebConfig", "WebState", "create_app", "wsgi_app"]
