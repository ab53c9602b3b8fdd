"""One list of secrets' names (redact.SECRET_NAMES) masks argument keys and free text alike."""

from __future__ import annotations

import pytest

from reliable.redact import MASK, SECRET_NAMES, is_secret_name, redact_secrets
from reliable.web.redaction import redact_text, redact_value


@pytest.mark.parametrize("key", ["password", "db_password", "X-Api-Key", "apikey", "api_key", "access_token",
                                 "card_number", "cardnumber", "CVV", "ssn", "iban", "client-secret", "Authorization"])
def test_secret_keys(key: str) -> None:
    assert is_secret_name(key)


@pytest.mark.parametrize("key", ["token_count", "TokenError", "classname", "passwordless_login", "amount",
                                 "session", "cardinality"])
def test_keys_that_merely_contain_a_name_are_not_secrets(key: str) -> None:
    assert not is_secret_name(key)


def test_every_name_masks_keys_and_free_text_alike() -> None:
    for name in SECRET_NAMES:
        assert redact_value({name: "s3cr3t-value", "other": 1}) == {name: MASK, "other": 1}
        assert "s3cr3t-value" not in redact_secrets(f"failed with {name}=s3cr3t-value here")


def test_deployment_patterns_add_to_the_names() -> None:
    assert redact_value({"holder_name": "Alice", "nested": [{"iban": "DE12"}]}, ["holder_*"]) == {
        "holder_name": MASK, "nested": [{"iban": MASK}]}
    assert redact_text("holder_name=Alice amount=3", ["holder_name"]) == f"holder_name={MASK} amount=3"
    assert redact_text(None) is None
