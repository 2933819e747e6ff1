"""The daemon's answers as the thin client takes them: an error answer is the broker error it reports.

``checked`` is the one reading of an error answer, for every command the
client runs (``main``) and for ``exec`` (``executing``): the daemon's one-line
message and its exit code, made into the error once, as the direct command
would have raised it.
"""

from __future__ import annotations

from broker.vocab.errors import DaemonReported

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from broker.daemon.transport import Answer  # only the type: a direct command never loads the transport


def checked(answer: Answer) -> Answer:
    """``answer`` when it is not an error; else the error it carries, raised."""
    if answer.status >= 400:
        document = answer.document if isinstance(answer.document, dict) else {}
        message = str(document.get("error", f"the broker daemon answered {answer.status}"))
        raise DaemonReported(message, answer.exit_code or 1)
    return answer
