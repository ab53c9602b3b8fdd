"""The CLI's API client on its own: errors as the server's message, paging, the token file (no server)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from reliable.cli.api_client import ApiClient, ApiError, ApiUnavailable, load_token
from reliable.errors import ConfigError


def client(handler: Callable[[httpx.Request], httpx.Response], url: str = "https://ops.example.com/reliable"
           ) -> ApiClient:
    return ApiClient(url, "rel_id_secret", transport=httpx.MockTransport(handler))


def test_requests_go_under_the_prefix_with_the_bearer_token() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"name": "otto"})

    assert client(handler).whoami() == {"name": "otto"}
    assert str(seen[0].url) == "https://ops.example.com/reliable/api/v1/whoami"
    assert seen[0].headers["authorization"] == "Bearer rel_id_secret"


def test_the_error_body_is_the_message() -> None:
    body = {"error": {"status": 409, "message": "job j: cannot resume a PENDING job", "type": "ControlRefused"}}
    with pytest.raises(ApiError) as caught:
        client(lambda r: httpx.Response(409, json=body)).command("j", "resume", {"reason": "r"})
    assert (caught.value.status, str(caught.value), caught.value.type) == (409, body["error"]["message"],
                                                                         "ControlRefused")


@pytest.mark.parametrize(("response", "expected"), [
    (httpx.Response(502, text="<html>bad gateway</html>"), "HTTP 502 Bad Gateway from https://ops.example.com"),
    (httpx.Response(401, json={"error": {"status": 401, "message": "unknown token"}}), "reliable tokens create"),
    (httpx.Response(302, headers={"location": "https://sso.example.com/"}), "redirected to https://sso.example.com/"),
])
def test_other_answers_say_what_went_wrong(response: httpx.Response, expected: str) -> None:
    with pytest.raises(ApiError) as caught:
        client(lambda r: response).whoami()
    assert expected in str(caught.value)


def test_no_answer_names_the_url_without_credentials() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ApiUnavailable) as caught:
        client(timeout, "https://bob:hunter2@ops.example.com/").whoami()
    assert "https://ops.example.com/ did not answer in time" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_pages_follow_the_cursor_up_to_the_limit() -> None:
    asked: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        start = int(request.url.params.get("cursor") or 0)
        jobs = [{"job_id": str(i)} for i in range(start, start + int(request.url.params["limit"]))]
        return httpx.Response(200, json={"jobs": jobs, "next_cursor": str(start + len(jobs))})

    pages = list(client(handler).pages("jobs", {"queue": "q", "actor": None}, limit=700))
    assert [len(p["jobs"]) for p in pages] == [500, 200]
    assert asked == [{"queue": "q", "limit": "500"}, {"queue": "q", "limit": "200", "cursor": "500"}]


def test_bad_urls_are_config_errors() -> None:
    for url in ("ops.example.com", "ftp://ops.example.com", "https://"):
        with pytest.raises(ConfigError, match="expected the API's URL"):
            ApiClient(url, "t")


def test_token_from_file_or_environment(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  rel_a_b  \nrest\n")
    path.chmod(0o600)
    assert load_token(str(path), environ={"RELIABLE_API_TOKEN": "rel_env"}) == "rel_a_b"
    assert load_token(None, environ={"RELIABLE_API_TOKEN": "rel_env"}) == "rel_env"
    with pytest.raises(ConfigError, match="tokens create"):
        load_token(None, environ={})
    path.write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        load_token(str(path), environ={})
    with pytest.raises(ConfigError, match="cannot read the token file"):
        load_token(str(tmp_path / "missing"), environ={})
