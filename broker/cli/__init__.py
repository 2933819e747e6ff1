"""The command line: parse, call the core, print. Only ``broker.entry``, ``__main__`` and the thin client import it
(the client: the parser made from the command table, ``broker.commands``, and the renderers, never typer or the
core)."""
