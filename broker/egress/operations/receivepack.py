"""The ref-update commands at the start of a ``git-receive-pack`` request body, read as the body arrives.

git's send-pack writes (``Documentation/gitprotocol-pack.txt``, "Reference
Update Request"): optional ``shallow OID`` lines, then one pkt-line per ref,
``OLD NEW REFNAME``, the first carrying ``NUL`` and the capabilities, a flush;
with the ``push-options`` capability, one pkt-line per option and a flush;
then the pack (none when every command is a deletion). ``CommandReader``
returns the commands as soon as that list is complete, without reading or
keeping the pack, and refuses (``PushError``) anything else: a list longer
than its limit, a body that ends inside it, object ids that are not lower-case
hex of the negotiated format's length, ref names git would call funny,
text that is not UTF-8, a signed push (``push-cert``, which GitHub does not
offer either), a special packet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.egress.operations.pktline import FLUSH, PacketError, PacketReader
from broker.egress.operations.refs import RefError, check_ref_name

#: The most bytes of a body read before its command list must be complete (about 40,000 refs of 100 bytes).
MAX_COMMAND_BYTES = 4 * 1024 * 1024
_OID = {40: re.compile(rb"[0-9a-f]{40}"), 64: re.compile(rb"[0-9a-f]{64}")}
_SHALLOW = re.compile(rb"shallow ([0-9a-f]{40}|[0-9a-f]{64})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PushError(ValueError):
    """A request body that is not a push the broker can read; the message says why (the bytes are not echoed)."""


@dataclass(frozen=True)
class RefUpdate:
    old: str
    new: str
    ref: str

    @property
    def deletes(self) -> bool:
        return not self.new.strip("0")

    @property
    def creates(self) -> bool:
        return not self.old.strip("0")


@dataclass(frozen=True)
class PushRequest:
    commands: tuple[RefUpdate, ...]
    capabilities: tuple[str, ...]
    options: tuple[str, ...] = ()
    shallow: int = 0
    size: int = 0  # bytes of the body up to the end of the command list (and the push options)

    def asks(self, capability: str) -> bool:
        return capability in self.capabilities


class CommandReader:
    """Feed the body in pieces; ``feed`` returns the ``PushRequest`` once its command list is complete."""

    def __init__(self, limit: int = MAX_COMMAND_BYTES) -> None:
        self.limit = limit
        self._packets = PacketReader()
        self._stage = "head"  # head (shallow lines, first command), commands, options, done
        self._commands: list[RefUpdate] = []
        self._capabilities: tuple[str, ...] = ()
        self._options: list[str] = []
        self._shallow = 0
        self._oid_length = 40
        self._result: PushRequest | None = None

    def feed(self, data: bytes) -> PushRequest | None:
        if self._result is not None:
            return self._result
        self._packets.push(data)
        try:
            while self._result is None and (item := self._packets.next()) is not None:
                self._take(item)
        except PacketError as exc:
            raise PushError(str(exc)) from None
        if self._result is None and self._packets.consumed + self._packets.pending > self.limit:
            raise PushError(f"the command list of the push is longer than {self.limit} bytes")
        return self._result

    def end(self) -> PushRequest:
        """The body ended: the request, or ``PushError`` when it ended inside the command list."""
        if self._result is None:
            raise PushError("the request body ended before the push's command list did")
        return self._result

    def _take(self, item: bytes | object) -> None:
        if item is FLUSH:
            if self._stage == "options" or not self._capabilities or "push-options" not in self._capabilities:
                self._finish()
            else:
                self._stage = "options"
            return
        assert isinstance(item, bytes)
        line = item[:-1] if item.endswith(b"\n") else item
        if self._stage == "options":
            self._options.append(_text(line, "a push option"))
        elif self._stage == "head" and _SHALLOW.fullmatch(line):
            self._shallow += 1
        elif self._stage == "head":
            if line.startswith(b"push-cert\0"):
                raise PushError("signed pushes (push-cert) are not supported")
            command, nul, capabilities = line.partition(b"\0")
            if nul:
                self._capabilities = tuple(_text(capabilities, "the capability list").split())
                self._oid_length = 64 if "object-format=sha256" in self._capabilities else 40
            self._stage = "commands"
            self._commands.append(self._command(command))
        else:
            if b"\0" in line:
                raise PushError("a NUL in a command after the first")
            self._commands.append(self._command(line))

    def _command(self, line: bytes) -> RefUpdate:
        parts = line.split(b" ", 2)
        pattern = _OID[self._oid_length]
        if len(parts) != 3 or not pattern.fullmatch(parts[0]) or not pattern.fullmatch(parts[1]):
            raise PushError(f"a command that is not OLD NEW REF with {self._oid_length}-digit lower-case object ids")
        ref = _text(parts[2], "a ref name")
        try:
            check_ref_name(ref)
        except RefError as exc:
            raise PushError(f"a ref name git would refuse ({exc})") from None
        return RefUpdate(parts[0].decode(), parts[1].decode(), ref)

    def _finish(self) -> None:
        self._stage = "done"
        self._result = PushRequest(
            tuple(self._commands), self._capabilities, tuple(self._options), self._shallow, self._packets.consumed
        )


def _text(data: bytes, what: str) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PushError(f"{what} that is not UTF-8") from None
    if _CONTROL.search(text):
        raise PushError(f"{what} holding a control character")
    return text
