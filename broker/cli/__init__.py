"""The command line: parse, call the core, print. Only ``broker.entry``, ``__main__`` and the thin client import it
(the client: the command table, its parser and the renderers, never typer or the core)."""
