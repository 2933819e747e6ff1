"""Every command of the table that the daemon answers has its daemon route, its renderer and its thin-client call.

The command table (``broker.commands.table``) declares each command once; the
daemon's dispatch (``broker.daemon.routes``) and the thin client
(``broker.client``) are made from it. Here: each route a command declares is
answered by the daemon's dispatch with the very function the route names, the
renderer and the call it names exist, and nothing the daemon answers is
unowned (a command's, or the daemon's own health, metrics and sweep).
"""

from __future__ import annotations

import inspect

import pytest

from broker.commands.declaring import Command, Route, TableError, resolve
from broker.commands.table import COMMANDS
from broker.daemon.routes import OWN, ROUTER

ANSWERED = [command for command in COMMANDS if command.daemon]


def test_the_daemon_answers_the_commands_it_always_answered() -> None:
    names = {command.name for command in ANSWERED}
    assert names == {
        "issue", "revoke", "status", "renew", "exec", "session allow", "session disallow", "approvals", "approve",
        "deny", "policy check", "identity jwks", "identity discovery", "identity revoked",
    }  # fmt: skip


@pytest.mark.parametrize("command", ANSWERED, ids=lambda c: c.name)
def test_every_route_of_a_daemon_command_is_answered_by_the_function_it_names(command: Command) -> None:
    assert command.routes, command.name
    for route in command.routes:
        example = route.path.replace("{id}", "s-4k2j9x7q3m1p")
        found = ROUTER.find(route.method, example)
        assert found is not None, f"broker {command.name}: no daemon route for {route.method} {route.path}"
        assert found.template == route.path
        assert found.value is resolve(route.answer)
        assert found.value.__module__.startswith("broker.daemon.endpoints."), route


@pytest.mark.parametrize("command", ANSWERED, ids=lambda c: c.name)
def test_every_daemon_command_has_its_renderer_and_its_thin_client_call(command: Command) -> None:
    assert command.render is not None and command.call is not None
    render, call = resolve(command.render), resolve(command.call)
    assert callable(render) and list(inspect.signature(render).parameters) == ["document", "values"], command.name
    assert callable(call) and list(inspect.signature(call).parameters)[1:] == ["args", "socket"], command.name
    assert command.call.startswith("broker.client."), command.name
    assert command.render.startswith("broker.cli."), command.name


def test_nothing_the_daemon_answers_is_left_without_an_owner() -> None:
    declared = {(route.method, route.path) for command in COMMANDS for route in command.routes}
    declared |= {(route.method, route.path) for route in OWN}
    assert set(ROUTER.templates) == declared


def test_a_command_marked_for_the_daemon_without_a_route_fails_when_declared() -> None:
    with pytest.raises(TableError, match=r"broker frob: answered by the daemon but declares no route"):
        Command(("frob",), "broker.cli.x:frob", "Frob.", daemon=True, call="broker.client.x:frob", render="x:y")
    with pytest.raises(TableError, match=r"broker frob: .* declares no renderer"):
        Command(("frob",), "m:f", "Frob.", daemon=True, routes=(Route("GET", "/v1/frob", "m:f"),), call="m:f")
    with pytest.raises(TableError, match=r"broker frob: .* declares no thin-client call"):
        Command(("frob",), "m:f", "Frob.", daemon=True, routes=(Route("GET", "/v1/frob", "m:f"),), render="m:f")
