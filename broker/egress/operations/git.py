"""git smart HTTP on a ``git`` host: which requests are fetches and pushes, the push decision, the answer git prints.

Fetches and clones (``info/refs?service=git-upload-pack``, ``POST
.../git-upload-pack``) pass, and so does the push's ref advertisement
(``info/refs?service=git-receive-pack``: a read, and letting it through is
what lets ``git push`` reach the request whose refusal it prints per ref).
``POST .../git-receive-pack`` is held until its command list has arrived
(``receivepack.CommandReader``; the pack is not read): every ref must fall
under a ``push`` glob and a deletion needs ``delete: true``; otherwise the push
is refused as a whole, answered with the status report ``git-receive-pack``
itself sends (``unpack ok``, then ``ng REF refused by policy RULE`` for every
ref), in side-band channel 1 when the client asked for ``side-band-64k`` (or
``side-band``), with the reason in channel 2 (git prints it as ``remote:``,
even for a quiet push, as it prints a hook's message).
A client that asked for no status report gets a 403 (git prints the HTTP
error). Any other request on a git host is not git's: another section of the
host decides it, or it is refused.
"""

from __future__ import annotations

import enum
from urllib.parse import parse_qsl

from broker.egress.operations.decision import Answer, Decision, Kind, allowed, clipped, refused_text
from broker.egress.operations.model import GitOperations
from broker.egress.operations.pktline import FLUSH_BYTES, MAX_PACKET, SIDEBAND_MAX, packet, sideband
from broker.egress.operations.receivepack import MAX_COMMAND_BYTES, CommandReader, PushError, PushRequest

RESULT_TYPE = "application/x-git-receive-pack-result"
NO_CACHE = (
    ("Expires", "Fri, 01 Jan 1980 00:00:00 GMT"),
    ("Pragma", "no-cache"),
    ("Cache-Control", "no-cache, max-age=0, must-revalidate"),
)
SERVICES = {"git-upload-pack": "fetch", "git-receive-pack": "push"}


class GitRequest(enum.Enum):
    FETCH_ADVERTISEMENT = "the ref advertisement of a fetch"
    PUSH_ADVERTISEMENT = "the ref advertisement of a push"
    FETCH = "a fetch"
    PUSH = "a push"
    OTHER = "not git smart HTTP"


def _classify_one(method: str, path: str, query: str) -> GitRequest:
    if path.endswith("/git-receive-pack"):
        return GitRequest.PUSH  # whatever the method: the push check refuses all but POST
    if path.endswith("/git-upload-pack"):
        return GitRequest.FETCH if method == "POST" else GitRequest.OTHER
    if path.endswith("/info/refs") and method in ("GET", "HEAD"):
        services = {value for name, value in parse_qsl(query, keep_blank_values=True) if name == "service"}
        if services == {"git-upload-pack"}:
            return GitRequest.FETCH_ADVERTISEMENT
        if services == {"git-receive-pack"}:
            return GitRequest.PUSH_ADVERTISEMENT
    return GitRequest.OTHER


def classify(method: str, paths: tuple[str, ...], query: str) -> GitRequest:
    """What a request is to git; with two readings of its path, a push if either is one, else one class or OTHER."""
    kinds = {_classify_one(method, path, query) for path in paths}
    if GitRequest.PUSH in kinds:
        return GitRequest.PUSH
    return kinds.pop() if len(kinds) == 1 else GitRequest.OTHER


def check_git(
    section: GitOperations, rule: str, kind: GitRequest, method: str, encoding: str
) -> Decision | ReceivePackCheck:
    """The head's decision on a smart-HTTP request (``kind`` is not OTHER), or the push's body check."""
    if kind is not GitRequest.PUSH:
        return allowed(rule, Kind.GIT, kind.value)
    if method != "POST":
        return refused_text(rule, Kind.GIT, f"{method} on git-receive-pack (a push is a POST)")
    if encoding not in ("", "identity"):
        return refused_text(rule, Kind.GIT, "a push whose body is content-encoded cannot be read")
    return ReceivePackCheck(section, rule)


class ReceivePackCheck:
    """The ``BodyCheck`` of a push: decides once the command list has arrived."""

    limit = MAX_COMMAND_BYTES + MAX_PACKET

    def __init__(self, section: GitOperations, rule: str) -> None:
        self.section = section
        self.rule = rule
        self.reader = CommandReader(MAX_COMMAND_BYTES)
        self.push: PushRequest | None = None

    def feed(self, data: bytes) -> Decision | None:
        try:
            self.push = self.reader.feed(data)
        except PushError as exc:
            return refused_text(self.rule, Kind.GIT, str(exc))
        return None if self.push is None else decide_push(self.section, self.rule, self.push)

    def end(self) -> Decision:
        try:
            self.push = self.reader.end()
        except PushError as exc:
            return refused_text(self.rule, Kind.GIT, str(exc))
        return decide_push(self.section, self.rule, self.push)


def decide_push(section: GitOperations, rule: str, push: PushRequest) -> Decision:
    """Every ref under ``push`` and no deletion unless ``delete``: allowed; else refused as a whole."""
    refs = [c.ref for c in push.commands]
    if not refs:
        return allowed(rule, Kind.GIT, "a push with no ref updates")
    outside = [c.ref for c in push.commands if not any(glob.matches(c.ref) for glob in section.push)]
    deleting = [c.ref for c in push.commands if c.deletes and not section.delete and c.ref not in outside]
    if not outside and not deleting:
        return allowed(rule, Kind.GIT, f"a push of {', '.join(refs)}")  # clipped to the first few
    problems = [f"{ref} is outside push" for ref in outside] + [f"deleting {ref} is not allowed" for ref in deleting]
    reason = "push refused as a whole: " + "; ".join(problems)
    failures = {}
    for ref in refs:
        if ref in outside:
            failures[ref] = f"refused by policy {rule}"
        elif ref in deleting:
            failures[ref] = f"refused by policy {rule} (deleting a ref is not allowed)"
        else:
            failures[ref] = f"refused by policy {rule} (another ref of this push is refused)"
    answer = report_answer(push, failures, clipped(f"refused by policy {rule}: {reason}", 1000))
    if answer is None:
        return refused_text(rule, Kind.GIT, reason)
    return Decision(False, rule, clipped(reason), Kind.GIT, answer)


def report_answer(push: PushRequest, failures: dict[str, str], note: str) -> Answer | None:
    """The status report ``git-receive-pack`` sends, every ref ``ng``; ``None`` when the client asked for none."""
    if not (push.asks("report-status") or push.asks("report-status-v2")):
        return None
    lines = [packet(b"unpack ok\n")]
    lines.extend(packet(f"ng {ref} {clipped(message)}\n".encode()) for ref, message in failures.items())
    report = b"".join(lines) + FLUSH_BYTES
    band = next((name for name in SIDEBAND_MAX if push.asks(name)), None)
    if band is None:
        return Answer(200, RESULT_TYPE, report, NO_CACHE)
    size = SIDEBAND_MAX[band]
    message = sideband(2, note.encode() + b"\n", size)  # like a hook's message: shown even to a quiet push
    return Answer(200, RESULT_TYPE, message + sideband(1, report, size) + FLUSH_BYTES, NO_CACHE)
