"""A running ``exec``'s control socket: an outside ``broker revoke`` asks it to stop serving its session at once.

``exec`` holds its session's lock until the command ends, so a revoke from
outside would otherwise wait for the command, while the session's proxy
keeps putting the secret in. The exec process listens on
``state_dir/control/SESSION.sock`` (the directory 0700, the socket 0600; the
name is a checked session id, never anything else). Only root and the
broker's own uid may ask (the kernel's ``SO_PEERCRED``, whatever the file
modes say); anyone else is answered ``refused`` and nothing happens. The
exchange is one line each way: ``revoke`` and, once the session's proxy
refuses, ``stopped``; or ``allow HOST:PORT`` / ``disallow HOST:PORT``
(``broker session allow|disallow``) and, once the proxy decides new
connections on the changed list, ``done`` (``none``: this exec runs no
proxy, or the destination did not parse; a JSON line ``{"error": ...,
"exit_code": N}``: the exec refused it, the policy deciding it there); or ``renew`` / ``renew NAME``
(``broker renew`` of a running session's proxied credentials) and one JSON
line: a list of what each renewal did (``none``: nothing here renews).
Paths are reached through a directory descriptor, so a
long ``state_dir`` never runs into the 108-byte limit of a socket address.
Connections are accepted by the broker's one accept loop
(``broker.host.serving.listening``), served one after another in its thread.

A process that holds many sessions (a daemon's gateway) listens once, on
``state_dir/control/gateway.sock`` (``SharedControlSocket``), instead of once
per session: an exchange there begins with ``session ID``, and the same
exchange follows for that session (``none``, or ``refused`` for a revoke, when
it holds no such session). The asking side tries the session's own socket
first and the shared one when there is none.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from broker.host.peercred import peer_credentials
from broker.host.serving.listening import Acceptor, Limits
from broker.vocab.errors import ProviderError
from broker.vocab.session_ids import check_session_id, is_session_id

REQUEST, STOPPED, REFUSED = b"revoke\n", b"stopped\n", b"refused\n"
SHARED_NAME = "gateway.sock"  # the control socket of a process holding many sessions
SESSION = b"session"
DONE, NONE = b"done\n", b"none\n"
NETWORK_VERBS = (b"allow", b"disallow")
RENEW = b"renew"
MAX_ANSWER = 64 * 1024  # a renew's JSON answer: a line per credential, at most a few dozen
MAX_LINE = 300  # a verb, a space and a destination (at most 262 characters)
MAX_REFUSAL = 2000  # a refusal's message (a policy denial is at most about 1,100 characters)
ANSWER_TIMEOUT = 30.0


@dataclass(frozen=True)
class Refusal:
    """Why the exec refused an allow (one line, nothing secret) and the exit code the asking command ends with."""

    message: str
    exit_code: int

    def line(self) -> bytes:
        answer = {"error": self.message[:MAX_REFUSAL], "exit_code": self.exit_code}
        return json.dumps(answer, separators=(",", ":")).encode() + b"\n"


#: Called with (allow or not, the destination's text as sent); True once the proxy applies it, a Refusal when the
#: exec refuses it, False when it runs no proxy.
OnNetwork = Callable[[bool, str], bool | Refusal]
#: Called with the credential named (None: every one); what each renewal did, or None when nothing renews here.
OnRenew = Callable[[str | None], list[dict[str, str]] | None]


@dataclass(frozen=True)
class Controls:
    """What one session does when asked: stop serving it (revoke), change its allow-list, renew now."""

    on_revoke: Callable[[], None]
    on_network: OnNetwork | None = None
    on_renew: OnRenew | None = None


def control_dir(state_dir: Path) -> Path:
    path = state_dir / "control"
    os.makedirs(path, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _socket_name(session_id: str) -> str:
    return f"{check_session_id(session_id, 'session id')}.sock"


@contextlib.contextmanager
def _reachable(directory: Path, name: str) -> Iterator[str]:
    """A short address for ``directory/name``: through a descriptor of the directory (no symbolic link followed)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{fd}/{name}"
    finally:
        os.close(fd)


def peer_uid(connection: socket.socket) -> int:
    return peer_credentials(connection).uid


def may_control(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _admit(connection: socket.socket, uid: int) -> bool:
    """Root and the broker's own uid; anyone else is answered ``refused`` and nothing happens."""
    if may_control(uid):
        return True
    with contextlib.suppress(OSError):
        connection.settimeout(ANSWER_TIMEOUT)
        connection.sendall(REFUSED)
    return False


class ControlSocket:
    """Listens for ``revoke`` for one session and calls ``on_revoke`` (once per request) for an allowed peer."""

    def __init__(
        self,
        state_dir: Path,
        session_id: str,
        on_revoke: Callable[[], None],
        on_network: OnNetwork | None = None,
        on_renew: OnRenew | None = None,
    ) -> None:
        self._directory = control_dir(state_dir)
        self._name = _socket_name(session_id)
        self._controls = Controls(on_revoke, on_network, on_renew)
        self._listener = _bind(self._directory, self._name)
        self._acceptor: Acceptor[int] = Acceptor(  # the broker's one accept loop; one exchange at a time, here
            self._listener,
            identify=peer_uid,
            key=lambda uid: uid,
            admit=_admit,
            serve=self._exchange,
            refuse=lambda connection, why: None,  # never over its one: each is served before the next is accepted
            limits=Limits(total=1, head_deadline=ANSWER_TIMEOUT, inline=True),
            stopping=threading.Event(),
            name="exec-control",
        )
        self._thread = self._acceptor.start("exec-control")

    @property
    def path(self) -> Path:
        return self._directory / self._name

    def _exchange(self, connection: socket.socket, uid: int) -> None:
        """One request line and its answer (an allowed peer: ``_admit`` turned the others away)."""
        with contextlib.suppress(OSError):
            connection.settimeout(self._acceptor.limits.head_deadline)
            _answer(connection, _read_line(connection), self._controls)

    def close(self) -> None:
        self._acceptor.stop()  # the loop wakes at once and closes the listener
        self._thread.join(timeout=ANSWER_TIMEOUT)
        self._listener.close()
        with contextlib.suppress(OSError), _reachable(self._directory, self._name) as address:
            os.unlink(address)

    def __enter__(self) -> ControlSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SharedControlSocket:
    """``state_dir/control/gateway.sock``: the control socket of every session ``lookup`` names (a gateway's); an
    exchange begins with ``session ID``. Served one connection per thread, at most ``SHARED_CONNECTIONS`` at once."""

    def __init__(self, state_dir: Path, lookup: Callable[[str], Controls | None]) -> None:
        self._directory = control_dir(state_dir)
        self._lookup = lookup
        self._listener = _bind(self._directory, SHARED_NAME)
        self._acceptor: Acceptor[int] = Acceptor(
            self._listener,
            identify=peer_uid,
            key=lambda uid: uid,
            admit=_admit,
            serve=self._exchange,
            refuse=lambda connection, why: None,  # closed: the asker sees no exec of the session, and says so
            limits=Limits(total=SHARED_CONNECTIONS, head_deadline=ANSWER_TIMEOUT),
            stopping=threading.Event(),
            name="gateway-control",
        )
        self._thread = self._acceptor.start("gateway-control")

    def _exchange(self, connection: socket.socket, uid: int) -> None:
        with contextlib.suppress(OSError):
            connection.settimeout(self._acceptor.limits.head_deadline)
            first, _, line = _read_line(connection, lines=2).partition(b"\n")
            verb, _, named = first.partition(b" ")
            session_id = named.decode("ascii", "replace")
            controls = self._lookup(session_id) if verb == SESSION and is_session_id(session_id) else None
            if controls is None:
                connection.sendall(REFUSED if line == REQUEST else NONE)
                return
            _answer(connection, line, controls)

    def close(self) -> None:
        self._acceptor.stop()
        self._thread.join(timeout=ANSWER_TIMEOUT)
        self._listener.close()
        with contextlib.suppress(OSError), _reachable(self._directory, SHARED_NAME) as address:
            os.unlink(address)


SHARED_CONNECTIONS = 16


def _bind(directory: Path, name: str) -> socket.socket:
    """A listening socket at ``directory/name`` (0600; one a killed process left there is replaced)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _reachable(directory, name) as address:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)
        listener.bind(address)
        os.chmod(address, 0o600)
    listener.listen(8)
    return listener


def _answer(connection: socket.socket, line: bytes, controls: Controls) -> None:
    """Answer one request ``line`` for a session with ``controls``."""
    if line == REQUEST:
        controls.on_revoke()
        connection.sendall(STOPPED)
        return
    verb, _, destination = line.rstrip(b"\n").partition(b" ")
    if verb == RENEW and line.endswith(b"\n"):  # answered from a thread: a revoke never waits for it
        named = destination.decode("ascii", "replace") or None
        threading.Thread(target=_renew, args=(connection.dup(), named, controls), daemon=True).start()
        return
    if verb in NETWORK_VERBS and line.endswith(b"\n"):
        on_network = controls.on_network
        applied = on_network is not None and on_network(verb == b"allow", destination.decode("ascii", "replace"))
        connection.sendall(applied.line() if isinstance(applied, Refusal) else DONE if applied else NONE)


def _renew(connection: socket.socket, credential: str | None, controls: Controls) -> None:
    with connection, contextlib.suppress(OSError):
        done = controls.on_renew(credential) if controls.on_renew is not None else None
        if done is None:
            connection.sendall(NONE)
            return
        connection.sendall(json.dumps(done, separators=(",", ":")).encode()[: MAX_ANSWER - 1] + b"\n")


@contextlib.contextmanager
def _asking(state_dir: Path, session_id: str) -> Iterator[socket.socket]:
    """A connection to whoever runs ``session_id`` here: its own control socket, else the shared one (the session
    named first); ``OSError`` when neither listens."""
    directory = state_dir / "control"
    name = _socket_name(session_id)
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        client.settimeout(ANSWER_TIMEOUT)
        try:
            with _reachable(directory, name) as address:
                client.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            client.close()
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(ANSWER_TIMEOUT)
            with _reachable(directory, SHARED_NAME) as address:
                client.connect(address)
            client.sendall(SESSION + b" " + session_id.encode("ascii") + b"\n")
        yield client
    finally:
        client.close()


def _read_line(connection: socket.socket, lines: int = 1) -> bytes:
    """One request line (with its newline), at most ``MAX_LINE`` bytes; what came when it is cut short (``lines``:
    that many lines, at most that many times as long)."""
    line = b""
    most = MAX_LINE * lines
    while not (line.endswith(b"\n") and line.count(b"\n") >= lines) and len(line) < most:
        piece = connection.recv(most - len(line))
        if not piece:
            break
        line += piece
    return line


def ask_network(state_dir: Path, session_id: str, allow: bool, destination: str) -> bool | Refusal | None:
    """Ask the ``exec`` running ``session_id`` to change its proxy's allow-list: True once applied, False when
    it runs no proxy, its Refusal when it refused the change, None when no exec of the session listens on this
    host (or it refused the asker)."""
    request = (b"allow " if allow else b"disallow ") + destination.encode("ascii") + b"\n"
    answer = b""
    try:
        with _asking(state_dir, session_id) as client:
            client.sendall(request)
            while not answer.endswith(b"\n") and len(answer) < MAX_ANSWER:
                piece = client.recv(MAX_ANSWER - len(answer))
                if not piece:
                    break
                answer += piece
    except OSError:
        return None
    if answer in (DONE, NONE):
        return answer == DONE
    try:
        refused = json.loads(answer) if answer.endswith(b"\n") else None
    except ValueError:
        return None
    if not isinstance(refused, dict) or not isinstance(refused.get("error"), str):
        return None
    code = refused.get("exit_code")
    return Refusal(refused["error"], code if isinstance(code, int) and not isinstance(code, bool) else 1)


def ask_to_revoke(state_dir: Path, session_id: str) -> bool:
    """Ask the ``exec`` running ``session_id`` to stop serving it; False when none listens (or it refused)."""
    try:
        with _asking(state_dir, session_id) as client:
            client.sendall(REQUEST)
            return client.recv(len(STOPPED)) == STOPPED
    except OSError:
        return False


def ask_renew(state_dir: Path, session_id: str, credential: str | None) -> list[dict[str, str]] | None:
    """Ask the ``exec`` running ``session_id`` to renew its proxied credentials now (``credential`` alone, when
    named): what each renewal did; None when no exec of the session listens on this host or none renews there."""
    request = RENEW + (b" " + credential.encode("ascii") if credential else b"") + b"\n"
    answer, asked = b"", False
    try:
        with _asking(state_dir, session_id) as client:
            client.sendall(request)
            asked = True
            while not answer.endswith(b"\n") and len(answer) < MAX_ANSWER:
                piece = client.recv(MAX_ANSWER - len(answer))
                if not piece:
                    break
                answer += piece
    except TimeoutError:
        if not asked:
            return None
        raise ProviderError(  # the exec is there and renewing: saying it runs no exec would be wrong
            f"session {session_id}'s exec did not answer within {ANSWER_TIMEOUT:g} s; its renewal may still"
            " finish (a replaced AWS key pair waits for uploads still under way on it): see credential.renewed"
            " in the log"
        ) from None
    except OSError:
        return None
    if not answer.endswith(b"\n") or answer in (NONE, REFUSED):
        return None
    try:
        done = json.loads(answer)
    except ValueError:
        return None
    if not isinstance(done, list) or not all(isinstance(item, dict) for item in done):
        return None
    return [{str(k): str(v) for k, v in item.items()} for item in done]
