"""PostgreSQL URLs as libpq and hosting platforms spell them (postgres://) are accepted; a driver
reliable does not ship is refused with the exact URL to use instead (password masked)."""

from __future__ import annotations

import pytest

from reliable.errors import ConfigError
from reliable.store import StateStore
from reliable.store.db import check_store_url


@pytest.mark.parametrize("given", ["postgres://app:pw@db.example:5433/jobs", "postgresql://app:pw@db.example:5433/jobs",
                                   "postgres+psycopg://app:pw@db.example:5433/jobs"])
def test_postgres_spellings_become_the_psycopg_url(given: str) -> None:
    parsed = check_store_url(given)
    assert parsed.render_as_string(hide_password=False) == "postgresql+psycopg://app:pw@db.example:5433/jobs"


def test_a_driver_not_installed_is_refused_with_the_url_to_use() -> None:
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("psycopg2 is installed here")
    with pytest.raises(ConfigError) as info:
        check_store_url("postgresql+psycopg2://app:secret@db.example/jobs")
    message = str(info.value)
    assert "needs the 'psycopg2' module" in message
    assert message.endswith("use postgresql+psycopg://app:***@db.example/jobs")
    assert "secret" not in message


def test_a_postgres_url_opens_a_working_store(pg_database: str) -> None:
    url = pg_database.replace("postgresql+psycopg://", "postgres://", 1)
    assert url.startswith("postgres://")
    store = StateStore(url)
    try:
        assert store.now() > 0 and store.count_by_status() is not None
    finally:
        store.close()
