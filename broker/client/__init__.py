"""The command line as a thin client of ``broker serve`` (SPEC.md, "Daemon mode").

Loaded by ``broker.entry`` when ``BROKER_SOCKET`` or the config's ``[daemon]
socket`` is set; it imports neither typer nor any provider SDK, and it never
falls back to direct mode: a daemon it cannot reach is exit 7.
"""
