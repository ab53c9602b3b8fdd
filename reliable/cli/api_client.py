"""The CLI's client of the HTTP API (`--api URL`): operators act without database credentials.

The server (`reliable web`) authenticates the token, decides who the caller is and what it may
do, and runs every command through `Control`; this module only speaks HTTP. Errors are
ReliableErrors with the server's message; a failure to connect names the URL, never the token.

    ApiError                 the API answered with an error ({"error": {status, message, type}})
    └── ApiUnavailable       no answer: connection refused, timeout, TLS or protocol failure
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from ..errors import ConfigError, ReliableError
from .env import ENV_API, ENV_TOKEN, ENV_TOKEN_FILE

__all__ = [
    "ENV_API", "ENV_TOKEN", "ENV_TOKEN_FILE", "NO_TOKEN", "PAGE_MAX", "ApiClient", "ApiError", "ApiUnavailable",
    "load_token",
]

#: The most rows one page of a listing may ask for (the API refuses more).
PAGE_MAX = 500

NO_TOKEN = (f"--api needs an API token: set {ENV_TOKEN}=rel_... or pass --token-file PATH (${ENV_TOKEN_FILE}), a "
            "file whose first line is the token. An administrator creates one with `reliable tokens create NAME "
            "--role operator` (or --role viewer to only look).")


class ApiError(ReliableError):
    """The API refused or failed a request: `status` (HTTP), the server's `message` and error `type`."""

    def __init__(self, status: int, message: str, error_type: str | None = None) -> None:
        self.status = status
        self.message = message
        self.type = error_type
        super().__init__(message)


class ApiUnavailable(ApiError):
    """The API could not be reached (status 0): the message names the URL and what failed."""

    def __init__(self, message: str) -> None:
        super().__init__(0, message, "ApiUnavailable")


def load_token(token_file: str | None, *, environ: Mapping[str, str] | None = None) -> str:
    """The API token: the first line of `token_file` if given, else $RELIABLE_API_TOKEN.

    A token file others can read is refused (like ssh's private keys): the token is a password.
    No token at all is a ConfigError saying how to get one.
    """
    env = os.environ if environ is None else environ
    if token_file:
        path = Path(token_file).expanduser()
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read the token file {path}: {exc.strerror or exc}") from None
        if os.name == "posix" and mode & stat.S_IROTH:
            raise ConfigError(f"the token file {path} is readable by every user of this machine: "
                              f"`chmod 600 {path}` (and revoke the token if others may have read it)")
        if os.name == "posix" and mode & stat.S_IRGRP:
            print(f"warning: the token file {path} is readable by its group: `chmod 600 {path}`", file=sys.stderr)
        token = next(iter(text.splitlines()), "").strip()
        if not token:
            raise ConfigError(f"the token file {path} is empty: its first line must be the token (rel_...)")
        return token
    token = env.get(ENV_TOKEN, "").strip()
    if not token:
        raise ConfigError(NO_TOKEN)
    return token


def _shown(url: httpx.URL) -> str:
    """The URL as it may be printed: without user and password."""
    return str(url.copy_with(username=None, password=None)) if url.userinfo else str(url)


class ApiClient:
    """A client of the reliable HTTP API at `url` (the app's root: `https://ops.example.com/reliable`).

    `timeout`: seconds to connect and for each answer. `transport`: an httpx transport (tests).
    """

    def __init__(self, url: str, token: str, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        base = httpx.URL(url.strip())
        if base.scheme not in ("http", "https") or not base.host:
            raise ConfigError(f"--api {url!r}: expected the API's URL, http(s)://HOST[:PORT][/PREFIX]")
        self.url = _shown(base)
        if base.scheme == "http" and base.host not in ("localhost", "127.0.0.1", "::1"):
            print(f"warning: --api {self.url} is plain HTTP: the token crosses the network unencrypted",
                  file=sys.stderr)
        self._http = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}",
                                                          "Accept": "application/json"},
                                  timeout=httpx.Timeout(timeout), transport=transport, follow_redirects=False)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ------------------------------------------------------------------------------

    def request(self, method: str, path: str, *, params: Mapping[str, Any] | None = None,
                body: Mapping[str, Any] | None = None, refusals: bool = False) -> Any:
        """`method` `path` (under /api/v1) and its JSON answer; ApiError for any error status, but with
        `refusals` a refused command's own answer (403 or 409 carrying its `outcome`)."""
        query = {k: v for k, v in (params or {}).items() if v is not None and v != [] and v != ()}
        try:
            response = self._http.request(method, f"api/v1/{path}", params=query, json=body)
        except httpx.TimeoutException as exc:
            raise ApiUnavailable(f"the reliable API at {self.url} did not answer in time ({type(exc).__name__})"
                                 ) from None
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"cannot reach the reliable API at {self.url}: {exc or type(exc).__name__}"
                                 ) from None
        if refusals and response.status_code in (403, 409):
            try:
                answer = response.json()
            except ValueError:
                answer = None
            if isinstance(answer, dict) and answer.get("outcome") == "refused":
                return answer
        if response.is_success:
            try:
                return response.json()
            except ValueError:
                raise ApiError(response.status_code, f"{method} {self.url}: the answer is not JSON; is this "
                                                     "the reliable API?") from None
        raise self._error(response)

    def _error(self, response: httpx.Response) -> ApiError:
        status = response.status_code
        message, error_type = None, None
        try:
            error = response.json().get("error")
            if isinstance(error, Mapping):
                message, error_type = error.get("message"), error.get("type")
            elif isinstance(error, str):
                message = error
        except (ValueError, AttributeError):
            pass
        if not message:
            message = f"HTTP {status} {response.reason_phrase} from {self.url}"
        if status == 401:
            message = f"{message} (the API at {self.url} did not accept the token: check ${ENV_TOKEN} or " \
                      "--token-file; `reliable tokens create NAME --role operator` makes one)"
        elif 300 <= status < 400:
            message = f"{message}: redirected to {response.headers.get('location', '?')}; give that URL to --api"
        return ApiError(status, str(message), error_type)

    # -- the API ---------------------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        """Who the token authenticates as: {name, role, source, token_id, queues, owners, may_act}."""
        result: dict[str, Any] = self.request("GET", "whoami")
        return result

    def pages(self, path: str, params: Mapping[str, Any], *, limit: int) -> Iterator[dict[str, Any]]:
        """Each page of the listing at `path` (jobs, dlq, review) until `limit` rows or the last page."""
        cursor: str | None = None
        left = limit
        while left > 0:
            page: dict[str, Any] = self.request("GET", path, params={**params, "limit": min(left, PAGE_MAX),
                                                                     "cursor": cursor})
            yield page
            left -= len(page.get("jobs", []))
            cursor = page.get("next_cursor")
            if not cursor or not page.get("jobs"):
                return

    def job(self, job_id: str, **params: Any) -> dict[str, Any]:
        """A job's detail (job, contract, attempts, effects, events, actions); `job_id` may be a unique prefix."""
        result: dict[str, Any] = self.request("GET", f"jobs/{quote(job_id, safe='')}", params=params)
        return result

    def events(self, job_id: str, **params: Any) -> list[dict[str, Any]]:
        """A job's events, oldest first (params: event, since, limit)."""
        result: list[dict[str, Any]] = self.request("GET", f"jobs/{quote(job_id, safe='')}/events",
                                                    params=params)["events"]
        return result

    def command(self, job_id: str, command: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Run `command` on one job: its CommandResult as a dict (ApiError 403/409 when refused)."""
        result: dict[str, Any] = self.request("POST", f"jobs/{quote(job_id, safe='')}/{command}", body=body)
        return result

    def create_operation(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Count a bulk operation's jobs: {operation_id, total, confirm_token, sample, ...}; nothing runs yet."""
        result: dict[str, Any] = self.request("POST", "operations", body=body)
        return result

    def confirm_operation(self, operation_id: str, confirm_token: str) -> dict[str, Any]:
        """Start a counted bulk operation."""
        result: dict[str, Any] = self.request("POST", f"operations/{quote(operation_id, safe='')}/confirm",
                                              body={"confirm_token": confirm_token})
        return result

    def operation(self, operation_id: str) -> dict[str, Any]:
        """A bulk operation's status and progress: {status, total, done, counts, ...}."""
        result: dict[str, Any] = self.request("GET", f"operations/{quote(operation_id, safe='')}")
        return result

    def cancel_operation(self, operation_id: str) -> dict[str, Any]:
        """Stop a bulk operation (the jobs already done stay done)."""
        result: dict[str, Any] = self.request("POST", f"operations/{quote(operation_id, safe='')}/cancel")
        return result

    # -- workflows and schedules (c28-flows) -----------------------------------------------------

    def act(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST a workflow or schedule command at `path` (workflows/ID/pause, schedules/NAME/trigger...):
        what it did, a refusal (`outcome: refused`) included; ApiError for any other error."""
        result: dict[str, Any] = self.request("POST", path, body=body, refusals=True)
        return result
