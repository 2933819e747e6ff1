"""How the command table declares a command: the kinds of option, ``Option``, ``Route``, ``Command``, ``Group``.

Kept apart from the table itself (``broker.commands.table``), which lists the
commands, so that each stays readable. On the thin client's cold path as the
table is: plain classes with slots and the standard library's nothing (no
dataclasses, no typing, no enum, no importlib: ``resolve`` uses the
interpreter's own ``__import__``).

A command ``broker serve`` answers (``daemon=True``) declares, besides its
options and its direct handler, every endpoint it uses (``Route``: method,
path, the daemon's function answering it), its thin client's call and its
renderer (what the direct command and the thin client both print with). A
command marked for the daemon without all three is a ``TableError`` when the
table is imported, naming the command: nothing is sent to a daemon that has
no route for it.
"""

from __future__ import annotations

FLAG = "flag"  # --json: True when given
TEXT = "text"  # --task VALUE
PATH = "path"  # --session-file VALUE, handed to the command as a pathlib.Path
CHOICE = "choice"  # --format VALUE, one of ``choices``
MANY = "many"  # --ro-bind VALUE, repeatable: a list
ARGUMENT = "argument"  # an optional positional path (policy lint DIR)
WORD = "word"  # a required positional word (approve REQUEST, session allow HOST:PORT)
REST = "rest"  # everything after the options or after --: exec's command


class Option:
    """One option or argument: ``dest`` is the handler's parameter, ``flags`` what the command line spells."""

    __slots__ = ("choices", "default", "dest", "envvar", "flags", "help", "kind", "metavar", "required", "show_default")

    def __init__(
        self,
        dest: str,
        *flags: str,
        kind: str = TEXT,
        help: str,
        default: object = None,
        required: bool = False,
        choices: tuple[str, ...] = (),
        envvar: str | None = None,
        metavar: str | None = None,
        show_default: bool = True,
    ) -> None:
        self.dest = dest
        self.flags = flags
        self.kind = kind
        self.help = help
        self.default = False if kind == FLAG else default
        self.required = required
        self.choices = choices
        self.envvar = envvar
        self.metavar = metavar
        self.show_default = show_default

    @property
    def takes_value(self) -> bool:
        return self.kind in (TEXT, PATH, CHOICE, MANY)

    @property
    def positional(self) -> bool:
        return self.kind in (ARGUMENT, WORD, REST)


class TableError(Exception):
    """A command declared incompletely: raised when the table is imported, naming the command."""


class Route:
    """An endpoint of ``broker serve``: its method, its path (``{id}`` stands for one path segment, a session or
    request id the answering function checks) and the daemon's function answering it (``module:function``)."""

    __slots__ = ("answer", "method", "path")

    def __init__(self, method: str, path: str, answer: str) -> None:
        self.method = method
        self.path = path
        self.answer = answer

    def __repr__(self) -> str:
        return f"Route({self.method} {self.path} -> {self.answer})"


class Command:
    """One command: its words (``("audit", "list")``), handler, help (summary line, blank line, body), options;
    for a command ``broker serve`` answers (``daemon``): its ``routes``, the thin client's ``call`` and the
    ``render`` both sides print with (each ``module:function``)."""

    __slots__ = ("call", "daemon", "handler", "help", "interspersed", "options", "render", "routes", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        handler: str,
        help: str,
        options: tuple[Option, ...] = (),
        *,
        daemon: bool = False,
        routes: tuple[Route, ...] = (),
        call: str | None = None,
        render: str | None = None,
        interspersed: bool = True,
    ) -> None:
        self.words = words
        self.handler = handler
        self.help = help
        self.options = options
        self.daemon = daemon
        self.routes = routes
        self.call = call  # the thin client's function: (values, socket) -> exit code
        self.render = render  # (document, values) -> None: prints the answer as the direct command does
        self.interspersed = interspersed  # False: the first positional ends the options (exec's command)
        if daemon:
            missing = [what for what, given in (("route", routes), ("thin-client call", call), ("renderer", render))
                       if not given]  # fmt: skip
            if missing:
                raise TableError(
                    f"broker {self.name}: answered by the daemon but declares no {' and no '.join(missing)}"
                )
        elif routes or call is not None:
            raise TableError(f"broker {self.name}: declares daemon routes or a thin-client call without daemon=True")

    @property
    def name(self) -> str:
        return " ".join(self.words)


class Group:
    """A command word with commands under it (``policy``, ``audit``)."""

    __slots__ = ("help", "word")

    def __init__(self, word: str, help: str) -> None:
        self.word = word
        self.help = help


def resolve(name: str) -> object:
    """The function a table entry names, ``module:function``, imported now (only the chosen command's module)."""
    module, _, attribute = name.partition(":")
    return getattr(__import__(module, fromlist=(attribute,)), attribute)
