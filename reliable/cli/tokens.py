"""`reliable tokens`: create, list and revoke the API tokens of the HTTP API and console."""

from __future__ import annotations

import click
from rich.table import Table

from ..access import ROLES, ApiTokens
from ..operators import Operator
from .common import (
    POSITIVE_DURATION,
    REASON,
    emit_json,
    fmt_time,
    handle_errors,
    open_store,
    print_table,
    stdout_console,
    store_option,
)

__all__ = ["tokens"]


@click.group()
def tokens() -> None:
    """Create, list and revoke API tokens for `reliable web` and --api.

    Only a hash of each secret is stored; a token is printed once, when it is created.

    \b
      reliable tokens create alice --role admin
      reliable tokens create oncall-bot --role operator --queue billing --queue 'exports-*'
      reliable tokens create grafana --role viewer --expires 90d
      reliable tokens revoke 3f2a9c1e4b7d --reason "laptop lost"
    """


@tokens.command("create")
@click.argument("name")
@click.option("--role", type=click.Choice(ROLES), required=True,
              help="viewer: read only (arguments redacted); operator: every command on its queues/owners; "
                   "admin: every command everywhere.")
@click.option("--queue", "queues", multiple=True, metavar="GLOB",
              help="Operator tokens: the queues it may act on (repeatable; default all).")
@click.option("--owner", "owners", multiple=True, metavar="GLOB",
              help="Operator tokens: the job owners it may act on (repeatable; default all).")
@click.option("--expires", type=POSITIVE_DURATION, metavar="DURATION", help="Expire after this long (e.g. 90d).")
@click.option("--operator", "operator_name", help="Who creates it, for the record [default: $RELIABLE_OPERATOR, "
                                                  "else your OS user].")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the token and its record as JSON.")
@handle_errors
def create(name: str, role: str, queues: tuple[str, ...], owners: tuple[str, ...], expires: float | None,
           operator_name: str | None, store_url: str | None, as_json: bool) -> None:
    """Create a token for NAME, the identity its actions are audited under. The token is printed once."""
    store = open_store(store_url)
    record, secret = ApiTokens(store).create(name, role, queues=queues, owners=owners, expires_in=expires,
                                              created_by=Operator.resolve(operator_name).name)
    if as_json:
        emit_json({**record.as_dict(), "token": secret})
        return
    click.echo(secret)
    click.echo(f"token {record.token_id} for {name} ({role}) created; it is shown only now: store it in a secret "
               "manager or RELIABLE_API_TOKEN", err=True)


@tokens.command("list")
@click.option("--all", "show_all", is_flag=True, help="Also revoked and expired tokens.")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def list_tokens(show_all: bool, store_url: str | None, as_json: bool) -> None:
    """The tokens (never their secrets), newest first."""
    records = ApiTokens(open_store(store_url)).list(include_inactive=show_all)
    if as_json:
        emit_json([r.as_dict() for r in records])
        return
    table = Table("token_id", "name", "role", "queues", "owners", "created", "expires", "last used", "revoked")
    for r in records:
        table.add_row(r.token_id, r.name, r.role, ",".join(r.queues), ",".join(r.owners), fmt_time(r.created_at),
                      fmt_time(r.expires_at), fmt_time(r.last_used_at), fmt_time(r.revoked_at))
    print_table(stdout_console(), table)


@tokens.command("revoke")
@click.argument("token_id")
@click.option("--reason", type=REASON, required=True, help="Why (kept with the token's record).")
@click.option("--operator", "operator_name", help="Who revokes it [default: $RELIABLE_OPERATOR, else your OS user].")
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the revoked token's record as JSON.")
@handle_errors
def revoke(token_id: str, reason: str, operator_name: str | None, store_url: str | None, as_json: bool) -> None:
    """Revoke TOKEN_ID at once (requests with it get 401; the record stays for the audit trail)."""
    by = Operator.resolve(operator_name).name
    record = ApiTokens(open_store(store_url)).revoke(token_id, by=by, reason=reason)
    if as_json:
        emit_json(record.as_dict())
        return
    click.echo(f"revoked token {record.token_id} of {record.name}")


