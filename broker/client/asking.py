"""What the thin client puts in a request: a checked session or request id, the manifest read with the caller's own
rights; and the command's renderer (the table names it) for the answer. A cold path's piece: standard library
and the broker's vocabulary only, each loaded when a command needs it."""

from __future__ import annotations

import json

from broker.commands.declaring import Command, resolve

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any


def session_id(value: object, what: str = "--session") -> str:
    """``value`` as a checked id: nothing in it to quote in a path."""
    from broker.vocab.session_ids import check_session_id

    return check_session_id(str(value), what)


def manifest(source: str) -> object:
    """The manifest read and parsed here, with the caller's own rights; the daemon gets it as JSON."""
    from broker.core.inputs.strictdata import read_task_file
    from broker.vocab.errors import ManifestError

    task = read_task_file(source)
    document = task.document()
    try:
        json.dumps(document)
    except (TypeError, ValueError):
        raise ManifestError(f"{task.what}: holds a value JSON cannot carry (a date, a binary string)") from None
    return document


def render(command: Command, document: Any, values: dict[str, object]) -> None:
    """Print the daemon's answer as the direct command prints it: through the renderer the table names."""
    resolve(str(command.render))(document, values)  # type: ignore[operator]
