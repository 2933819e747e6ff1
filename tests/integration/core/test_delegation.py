"""Delegation from inside a real bubblewrap sandbox: the session's socket, children only narrower, revoked with it.

``broker exec`` (direct, as root: the sandbox is uid 1000 under setpriv)
binds ``broker.sock`` into the session directory; the sandboxed command asks
there with ``curl --unix-socket`` and with the thin client (``BROKER_SOCKET``
is its hint). The child's files appear under ``/run/secrets/children/ID``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.daemon import _client_packages
from tests.fixtures.delegating import DELEGATE_POLICY, PARENT_TASK, WIDER_VAULT, child, write_children
from tests.fixtures.openbao import OpenBao
from tests.fixtures.sandbox import python_runtime, sandbox_unavailable

pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

ASK = 'curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/"$2".out -w "$2 %{http_code}\\n" -X "$1"'
INSIDE = (
    r"""
ask() { """
    + ASK
    + r""" ${3:+--data-binary @/workspace/$3.json} "http://broker$4"; }
test -S /run/secrets/broker.sock && echo "socket $BROKER_SOCKET"
ask GET health "" /v1/health
ask POST narrow narrow /v1/sessions
CHILD=$(sed -n 's/^  "session": "\(s-[a-z0-9]*\)",$/\1/p' /workspace/narrow.out)
test -r "/run/secrets/children/$CHILD/kv/token" && echo "child-token-readable $CHILD"
test -e "/run/secrets/children/$CHILD/broker.sock" || echo "child-has-no-socket"
for name in WIDER; do ask POST "wide-$name" "wide-$name" /v1/sessions; done
ask GET approvals "" /v1/approvals
ask POST sweep "" /v1/sweep
ask DELETE parent "" "/v1/sessions/$BROKER_SESSION"
ask GET children "" /v1/sessions
PYTHONPATH=@CLIENT@ @PYTHON@ -m broker issue --task /workspace/thin.json --json > /workspace/thin.out && echo thin-ok
"""
)


def _workspace(tmp_path: Path) -> Path:
    path = tmp_path / "workspace"
    path.mkdir()
    os.chown(path, 1000, 1000)
    return path


def _exec(env: BrokerEnv, workspace: Path, script: str, *extra: str) -> tuple[int, str, str]:
    python, prefix = python_runtime()
    client = str(_client_packages())
    script = script.replace("@CLIENT@", client).replace("@PYTHON@", python)
    result = env.run_process(
        "exec",
        "--task",
        str(env.write_task(PARENT_TASK)),
        "--workspace",
        str(workspace),
        "--ro-bind",
        prefix,
        "--ro-bind",
        client,
        *extra,
        "--",
        "sh",
        "-c",
        script,
        timeout=240,
    )
    return result.code, result.stdout, result.stderr


def _answer(workspace: Path, name: str) -> dict[str, object]:
    answer: dict[str, object] = json.loads((workspace / f"{name}.out").read_text())
    return answer


def test_a_sandbox_asks_its_socket_for_a_narrower_child_and_nothing_else_of_the_broker(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    vault_env.write_policy(DELEGATE_POLICY.format(depth=1))
    workspace = _workspace(tmp_path)
    children = {"narrow": child(), "thin": child(task="fix-deleg-thin")}
    children.update({f"wide-{name}": document for name, (document, _) in WIDER_VAULT.items()})
    write_children(workspace, children)
    script = INSIDE.replace("WIDER", " ".join(WIDER_VAULT))
    code, out, err = _exec(vault_env, workspace, script)
    assert code == 0, out + err
    lines = out.splitlines()
    parent = next(r["session"] for r in vault_env.log_records() if r["event"] == "session.issued")
    assert lines[0] == "socket /run/secrets/broker.sock"
    assert "health 200" in lines and _answer(workspace, "health")["session"] == parent
    assert "narrow 201" in lines
    narrow = _answer(workspace, "narrow")
    assert narrow["parent"] == parent and narrow["mount_path"] == f"/run/secrets/children/{narrow['session']}"
    assert f"child-token-readable {narrow['session']}" in lines and "child-has-no-socket" in lines
    for name, (_, key) in WIDER_VAULT.items():
        answer = _answer(workspace, f"wide-{name}")
        assert f"wide-{name} 403" in lines and answer["exit_code"] == 3, (name, answer)
        assert f"{key}:" in str(answer["error"]) and parent in str(answer["error"]), (name, answer)
    for name in ("approvals", "sweep", "parent"):  # nothing else of the broker: not even its own session
        assert f"{name} 404" in lines, (name, lines)
        assert parent in str(_answer(workspace, name)["error"])
    assert "children 200" in lines
    listed: list[dict[str, object]] = json.loads((workspace / "children.out").read_text())
    assert [c["session"] for c in listed] == [narrow["session"]]  # its own children only, the live ones
    assert "thin-ok" in lines
    thin = json.loads((workspace / "thin.out").read_text())
    assert thin["parent"] == parent and thin["task"] == "fix-deleg-thin"
    issued = {r["session"]: r for r in vault_env.log_records() if r["event"] == "credential.issued"}
    assert issued[narrow["session"]]["parent"] == parent and issued[narrow["session"]]["scope"]["policies"] == [
        "ci-read"
    ]
    # revoked with the parent when the command ended: every child, then the parent
    states = {item["session"]: item["state"] for item in vault_env.run("status", "--all", "--json").json()}
    assert states == {parent: "revoked", narrow["session"]: "revoked", thin["session"]: "revoked"}
    assert not any(openbao.accessor_exists(r["reference"]["accessor"]) for r in issued.values())
    revoked = [r for r in vault_env.log_records() if r["event"] == "session.revoked"]
    assert [r["session"] for r in revoked][-1] == parent and {r.get("parent") for r in revoked[:-1]} == {parent}
    denied = [r for r in vault_env.log_records() if r["event"] == "session.denied"]
    assert len(denied) == len(WIDER_VAULT) and {r["parent"] for r in denied} == {parent}
    assert vault_env.run("audit", "verify").code == 0


def test_the_socket_is_the_sandbox_users_and_refuses_any_other_peer(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    vault_env.write_policy(DELEGATE_POLICY.format(depth=1))
    task = vault_env.write_task(PARENT_TASK)
    command = ["exec", "--task", str(task), "--workspace", str(_workspace(tmp_path)), "--", "sh", "-c", "sleep 600"]
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        sockets: list[Path] = []
        while not sockets and time.monotonic() < deadline and process.poll() is None:
            sockets = list(vault_env.runtime_dir.glob("s-*/broker.sock"))
            time.sleep(0.1)
        [path] = sockets
        info = os.lstat(path)
        assert stat.S_ISSOCK(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
        assert (info.st_uid, info.st_gid) == (1000, 1000)
        python, _ = python_runtime()
        answers = {}
        for uid in (59125, 0):  # a stranger (the file mode stops it), root (the peer check does); its user: above
            prefix = ["setpriv", f"--reuid={uid}", "--regid=1000", "--clear-groups"]
            probe = subprocess.run(
                [*prefix, python, "-I", "-c", PROBE, str(path)], capture_output=True, text=True, timeout=60
            )
            answers[uid] = probe.stdout.strip() or probe.stderr
        assert answers == {59125: "refused", 0: "closed"}
    finally:
        process.terminate()
        process.communicate(timeout=120)
    refused = [r for r in vault_env.log_records() if r["event"] == "session.denied"]
    assert refused == []  # nothing reached the broker's decisions


PROBE = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
except OSError:
    print("refused"); sys.exit()
s.settimeout(20)
try:  # the broker may close before the request is even written: a broken pipe is that close too
    s.sendall(b"GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
    print("closed" if s.recv(100) == b"" else "answered")
except (ConnectionResetError, BrokenPipeError):
    print("closed")
"""


DEPTH = r"""
ask() { curl -sS --unix-socket "$1" -o "/workspace/$2.out" -w "$2 %{http_code}\n" -X POST \
        --data-binary "@/workspace/$3.json" http://broker/v1/sessions; }
ask /run/secrets/broker.sock first narrow
FIRST=$(sed -n 's/^  "session": "\(s-[a-z0-9]*\)",$/\1/p' /workspace/first.out)
ask "/run/secrets/children/$FIRST/broker.sock" second narrower
SECOND=$(sed -n 's/^  "session": "\(s-[a-z0-9]*\)",$/\1/p' /workspace/second.out)
test -r "/run/secrets/children/$FIRST/children/$SECOND/kv/token" && echo grandchild-token-readable
test -e "/run/secrets/children/$FIRST/children/$SECOND/broker.sock" || echo grandchild-has-no-socket
ask "/run/secrets/children/$FIRST/broker.sock" wider-than-first narrow-uses
"""


def test_a_child_delegates_further_only_as_deep_as_the_rule_allows_and_only_narrower_than_itself(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    vault_env.write_policy(DELEGATE_POLICY.format(depth=2))
    workspace = _workspace(tmp_path)
    narrower = child(credential={"num_uses": 1, "ttl": "2m"}, ttl="2m")
    wider = child(
        credential={"policies": ["ci-read", "ci-write"], "ttl": "1m"}, ttl="1m"
    )  # the parent's, not the first's
    write_children(workspace, {"narrow": child(), "narrower": narrower, "narrow-uses": wider})
    code, out, err = _exec(vault_env, workspace, DEPTH)
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[:2] == ["first 201", "second 201"], lines
    assert "grandchild-token-readable" in lines and "grandchild-has-no-socket" in lines
    first, second = _answer(workspace, "first"), _answer(workspace, "second")
    assert second["parent"] == first["session"]
    assert "wider-than-first 403" in lines
    error = str(_answer(workspace, "wider-than-first")["error"])
    assert "credentials[0].policies[1]: ci-write" in error and str(first["session"]) in error
    states = {item["session"]: item["state"] for item in vault_env.run("status", "--all", "--json").json()}
    assert set(states.values()) == {"revoked"} and len(states) == 3
    revoked = [r["session"] for r in vault_env.log_records() if r["event"] == "session.revoked"]
    assert revoked == [second["session"], first["session"], revoked[-1]]  # the grandchild first, the parent last


def test_a_rule_without_delegate_gives_no_socket(vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path) -> None:
    vault_env.write_policy(DELEGATE_POLICY.format(depth=1).replace("    delegate: true\n    delegate_depth: 1\n", ""))
    code, out, err = _exec(
        vault_env, _workspace(tmp_path), 'test -e /run/secrets/broker.sock; echo "$? ${BROKER_SOCKET:-unset}"'
    )
    assert code == 0, err
    assert out.strip() == "1 unset"


def test_a_killed_exec_broker_leaves_its_children_to_sweep(
    vault_env: BrokerEnv, openbao: OpenBao, tmp_path: Path
) -> None:
    vault_env.write_policy(DELEGATE_POLICY.format(depth=1))
    workspace = _workspace(tmp_path)
    write_children(workspace, {"narrow": child()})
    script = (
        'curl -sS --unix-socket "$BROKER_SOCKET" -o /workspace/narrow.out -X POST'
        " --data-binary @/workspace/narrow.json http://broker/v1/sessions && touch /workspace/asked && exec sleep 600"
    )
    task = vault_env.write_task(PARENT_TASK)
    command = ["exec", "--task", str(task), "--workspace", str(workspace), "--", "sh", "-c", script]
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "--config", str(vault_env.config_path), *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not (workspace / "asked").exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        assert (workspace / "asked").exists(), process.communicate(timeout=5)
    finally:
        process.kill()
        process.communicate(timeout=60)
    narrow = _answer(workspace, "narrow")
    swept = vault_env.run("sweep", "--json")
    assert swept.code == 0, swept.stderr
    states = {item["session"]: item["state"] for item in vault_env.run("status", "--all", "--json").json()}
    assert states[str(narrow["session"])] == "revoked" and set(states.values()) == {"revoked"}
    issued = [r for r in vault_env.log_records() if r["event"] == "credential.issued"]
    assert len(issued) == 2 and not any(openbao.accessor_exists(r["reference"]["accessor"]) for r in issued)
