"""``broker renew`` asking a running exec over its control socket: a slow answer is not "no exec here".

A renewal of a proxied AWS key pair revokes the replaced keys only once no
upload re-signed with them is under way, so the exec may answer later than
the asker waits. The asker must then say that the exec is renewing and may
still finish, not that no exec of the session runs on this host (which
``broker renew`` turns into "runs no broker exec", exit 2). Before, a slow
answer and no listener were the same ``None``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker.host import control
from broker.host.control import ControlSocket, ask_renew
from broker.vocab.errors import ProviderError

SESSION = "s-0123456789ab"


def test_a_renewal_slower_than_the_asker_waits_is_named_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control, "ANSWER_TIMEOUT", 0.5)
    release = threading.Event()

    def slow(named: str | None) -> list[dict[str, str]]:
        release.wait(10)
        return [{"name": "store", "outcome": "renewed"}]

    with ControlSocket(tmp_path, SESSION, lambda: None, on_renew=slow):
        with pytest.raises(ProviderError, match="did not answer within 0.5 s; its renewal may still finish"):
            ask_renew(tmp_path, SESSION, None)
        release.set()
        assert ask_renew(tmp_path, SESSION, None) == [{"name": "store", "outcome": "renewed"}]


def test_no_exec_listening_is_none(tmp_path: Path) -> None:
    control.control_dir(tmp_path)
    assert ask_renew(tmp_path, SESSION, None) is None
