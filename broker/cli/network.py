"""``broker session allow | disallow``: a running session's egress allow-list, changed (parse, call the core, print)."""

from __future__ import annotations

from typing import Annotated

import typer

from broker.cli.context import load_config, open_broker, print_json

session_app = typer.Typer(help="Change a running session's egress allow-list.", no_args_is_help=True)

SESSION = typer.Option("--session", help="Session id (its exec must be running).")
JSON = typer.Option("--json", help="Print the change as JSON.")


def _change(ctx: typer.Context, session: str, destination: str, *, allow: bool, as_json: bool) -> None:
    from broker.core.allowing import change_network

    with open_broker(load_config(ctx)) as broker:
        change = change_network(broker, session, destination, allow=allow)
    if as_json:
        print_json(change.to_json())
    else:
        typer.echo(f"{change.session}: {change.destination} {'allowed' if allow else 'disallowed'}")


@session_app.command("allow")
def allow(
    ctx: typer.Context,
    destination: Annotated[str, typer.Argument(help="HOST:PORT, *.SUFFIX:PORT or [IPv6]:PORT.")],
    session: Annotated[str, SESSION],
    as_json: Annotated[bool, JSON] = False,
) -> None:
    """Let the running session reach HOST:PORT, if its policy rule's network covers it (exit 3 if not).

    Example: broker session allow --session s-4k2j9x7q3m1p pypi.org:443
    """
    _change(ctx, session, destination, allow=True, as_json=as_json)


@session_app.command("disallow")
def disallow(
    ctx: typer.Context,
    destination: Annotated[str, typer.Argument(help="HOST:PORT as allowed before.")],
    session: Annotated[str, SESSION],
    as_json: Annotated[bool, JSON] = False,
) -> None:
    """Refuse HOST:PORT to every connection the running session opens from now on.

    Example: broker session disallow --session s-4k2j9x7q3m1p pypi.org:443
    """
    _change(ctx, session, destination, allow=False, as_json=as_json)
