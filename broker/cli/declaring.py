"""How the command table declares a command: the kinds of option, ``Option``, ``Command``, ``Group``.

Kept apart from the table itself (``broker.cli.table``), which lists the
commands, so that each stays readable. On the thin client's cold path as the
table is: plain classes with slots and the standard library's nothing (no
dataclasses, no typing, no enum).
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


class Command:
    """One command: its words (``("audit", "list")``), handler, help (summary line, blank line, body), options."""

    __slots__ = ("daemon", "handler", "help", "interspersed", "options", "words")

    def __init__(
        self,
        words: tuple[str, ...],
        handler: str,
        help: str,
        options: tuple[Option, ...] = (),
        *,
        daemon: bool = False,
        interspersed: bool = True,
    ) -> None:
        self.words = words
        self.handler = handler
        self.help = help
        self.options = options
        self.daemon = daemon
        self.interspersed = interspersed  # False: the first positional ends the options (exec's command)

    @property
    def name(self) -> str:
        return " ".join(self.words)


class Group:
    """A command word with commands under it (``policy``, ``audit``)."""

    __slots__ = ("help", "word")

    def __init__(self, word: str, help: str) -> None:
        self.word = word
        self.help = help
