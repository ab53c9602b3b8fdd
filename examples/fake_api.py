"""A fake payment provider and partner API for the examples (stdlib only; no side effect on import).

    .venv/bin/python -m examples.fake_api            # serve on http://127.0.0.1:8099 (PORT to change)

- POST /charges   {"order_id", "amount_cents"} + header Idempotency-Key (required): the same key
  returns the same charge, as real providers do. amount_cents > 100000: 402 card declined.
- POST /refunds   {"charge_key"} + Idempotency-Key: refunds the charge made with that key.
- POST /receipts  {"order_id"}: 200.
- GET  /contacts?cursor=N: pages of contacts ({"contacts": [...], "next": N+1 or null}); every
  `throttle_every`-th request answers 429 with Retry-After: `retry_after` seconds.

The tests drive `FakeApi.handle` through `httpx.MockTransport`; `serve()` puts it behind a real
HTTP server for manual runs.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx


@dataclass
class FakeApi:
    """In-memory provider state; `handle` answers one request."""

    pages: int = 5
    throttle_every: int = 0  # 0: never rate limit
    retry_after: int = 1
    charges: dict[str, dict[str, Any]] = field(default_factory=dict)  # idempotency key -> charge
    refunds: dict[str, dict[str, Any]] = field(default_factory=dict)
    receipts: list[str] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], Any]:
        """(status, headers, JSON body) for one request."""
        url = urlsplit(target)
        payload = json.loads(body) if body else {}
        key = headers.get("idempotency-key")
        with self._lock:
            self.requests.append((method, url.path))
            if self.throttle_every and len(self.requests) % self.throttle_every == 0:
                return 429, {"Retry-After": str(self.retry_after)}, {"error": "slow down"}
            if (method, url.path) == ("POST", "/charges"):
                if not key:
                    return 400, {}, {"error": "Idempotency-Key header required"}
                if key not in self.charges:
                    if payload["amount_cents"] > 100_000:
                        return 402, {}, {"error": "card declined"}
                    self.charges[key] = {"id": f"ch_{len(self.charges) + 1}", **payload, "refunded": False}
                return 200, {}, self.charges[key]
            if (method, url.path) == ("POST", "/refunds"):
                charge = self.charges.get(payload["charge_key"])
                if charge is None:
                    return 404, {}, {"error": "no such charge"}
                if key not in self.refunds:
                    charge["refunded"] = True
                    self.refunds[key or ""] = {"id": f"re_{len(self.refunds) + 1}", "charge": charge["id"]}
                return 200, {}, self.refunds[key or ""]
            if (method, url.path) == ("POST", "/receipts"):
                self.receipts.append(payload["order_id"])
                return 200, {}, {"ok": True}
            if (method, url.path) == ("GET", "/contacts"):
                cursor = int(parse_qs(url.query).get("cursor", ["0"])[0])
                contacts = [{"id": f"c{cursor}-{i}", "email": f"user{cursor}.{i}@example.com"} for i in range(3)]
                return 200, {}, {"contacts": contacts, "next": cursor + 1 if cursor + 1 < self.pages else None}
        return 404, {}, {"error": f"no route {method} {url.path}"}

    def transport(self) -> httpx.MockTransport:
        """An httpx transport answering from this fake (no network)."""

        def respond(request: httpx.Request) -> httpx.Response:
            status, headers, data = self.handle(request.method, str(request.url.raw_path, "ascii"),
                                                {k.lower(): v for k, v in request.headers.items()}, request.content)
            return httpx.Response(status, headers=headers, json=data)

        return httpx.MockTransport(respond)


def serve(api: FakeApi, port: int) -> ThreadingHTTPServer:
    """Serve `api` over HTTP on 127.0.0.1:`port` (call serve_forever on the result)."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, headers, data = api.handle(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                                               body)
            raw = json.dumps(data).encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_GET = do_POST = _answer

    return ThreadingHTTPServer(("127.0.0.1", port), Handler)


if __name__ == "__main__":
    port = int(os.environ.get("PORT", "8099"))
    server = serve(FakeApi(pages=20, throttle_every=int(os.environ.get("THROTTLE_EVERY", "7"))), port)
    print(f"fake API on http://127.0.0.1:{port} (Ctrl-C to stop)")
    server.serve_forever()
