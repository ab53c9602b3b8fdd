"""One list of secrets' names (redact.SECRET_NAMES) masks argument keys and free text alike."""

from __future__ import annotations

import pytest

from reliable.disclosure import Audience, Kind, disclose
from reliable.redact import MASK, SECRET_NAMES, is_secret_name, redact_secrets


@pytest.mark.parametrize("key", ["password", "db_password", "X-Api-Key", "apikey", "api_key", "access_token",
                                 "card_number", "cardnumber", "CVV", "ssn", "iban", "client-secret", "Authorization"])
def test_secret_keys(key: str) -> None:
    assert is_secret_name(key)


@pytest.mark.parametrize("key", ["token_count", "TokenError", "classname", "passwordless_login", "amount",
                                 "session", "cardinality"])
def test_keys_that_merely_contain_a_name_are_not_secrets(key: str) -> None:
    assert not is_secret_name(key)


MASKED = Audience("viewer", False)


def test_every_name_masks_keys_and_free_text_alike() -> None:
    for name in SECRET_NAMES:
        assert disclose({name: "s3cr3t-value", "other": 1}, Kind.ARGUMENTS, MASKED) == {name: MASK, "other": 1}
        assert "s3cr3t-value" not in redact_secrets(f"failed with {name}=s3cr3t-value here")


