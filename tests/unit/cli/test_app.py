"""The command line in process, without a server: a malformed session id is refused before any file is touched,
and an unknown session, an unreadable state dir or a corrupt session store is one line with exit 2.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv


def test_unknown_session_is_bad_input(broker_env: BrokerEnv) -> None:
    result = broker_env.run("revoke", "--session", "s-doesnotexist")
    assert result.code == 2 and result.stderr == "broker: error: unknown session 's-doesnotexist'\n"


def test_an_unreadable_state_dir_is_a_one_line_error(broker_env: BrokerEnv) -> None:
    broker_env.settings["state_dir"] = "/proc/version/state"
    broker_env.write_config()
    result = broker_env.run("status")
    assert result.code == 2 and result.stderr.startswith("broker: error: state_dir /proc/version/state")
    assert result.stderr.count("\n") == 1


def test_a_corrupt_session_store_is_a_one_line_error(broker_env: BrokerEnv) -> None:
    broker_env.state_dir.mkdir(mode=0o700)
    (broker_env.state_dir / "sessions.db").write_bytes(b"this is not sqlite" * 100)
    result = broker_env.run("status")
    assert result.code == 2 and "session store" in result.stderr and result.stderr.count("\n") == 1


def tree_of(path: Path) -> list[str]:
    return sorted(str(Path(top, name).relative_to(path)) for top, dirs, files in os.walk(path) for name in dirs + files)


SESSION_COMMANDS = [["revoke", "--session"], ["renew", "--session"], ["audit", "list", "--session"]]
BAD_SESSION_IDS = [
    "../../x",
    "../../../x",
    "s-aaaaaaaaaaaa/../../../x",
    "ABSOLUTE",
    "s-" + "a" * 33,
    "s-aaaaaaaaaaa",
    "S-AAAAAAAAAAAA",
    "s-aaaaaaaaaaaa\n",
    "",
]


@pytest.mark.parametrize("command", SESSION_COMMANDS, ids=lambda c: c[0] if c[0] != "audit" else "audit-list")
@pytest.mark.parametrize("session", BAD_SESSION_IDS)
def test_a_malformed_session_id_is_refused_before_any_file_is_touched(
    broker_env: BrokerEnv, tmp_path: Path, command: list[str], session: str
) -> None:
    """``renew --session ../../x`` used to create ``x.lock`` wherever the id pointed, before any lookup."""
    if session == "ABSOLUTE":
        session = str(tmp_path / "anywhere")
    before = tree_of(tmp_path)
    result = broker_env.run(*command, session)
    assert result.code == 2, result.stderr
    assert result.stderr.startswith("broker: error: --session ") and result.stderr.count("\n") == 1
    assert "is not a session id" in result.stderr
    assert tree_of(tmp_path) == before  # no lock file at the target, not even the state_dir
    assert not broker_env.state_dir.exists()


@pytest.mark.parametrize("session", ["s-aaaaaaaaaaaa", "s-" + "0123456789abcdef" * 2])
def test_a_well_formed_unknown_session_is_looked_up(broker_env: BrokerEnv, session: str) -> None:
    for command in SESSION_COMMANDS[:2]:
        result = broker_env.run(*command, session)
        assert result.code == 2 and result.stderr == f"broker: error: unknown session {session!r}\n"
