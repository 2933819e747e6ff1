"""The ``broker`` console script.

``broker --version`` and ``broker --help`` are answered from this module
alone (the help text is pre-rendered in ``broker.cli.help_text``, and a test
keeps it equal to what the CLI renders), so a launcher's health probe does
not pay for loading the whole command line. With a daemon configured
(``BROKER_SOCKET`` or ``[daemon] socket``) the session commands go to the thin
client ``broker.client``; everything else goes to ``broker.cli.app``, with the
config file's table if the look for a daemon read it (it is parsed once).
"""

from __future__ import annotations

import sys


def run() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        from broker import __version__

        sys.stdout.write(f"broker {__version__}\n")
        sys.exit(0)
    if args in (["--help"], ["-h"]):
        from broker.cli.help_text import TOP_LEVEL_HELP

        sys.stdout.write(TOP_LEVEL_HELP)
        sys.exit(0)
    from broker.client.main import thin_client

    outcome = thin_client(args)  # with a daemon configured, the session commands are its clients: never direct
    if isinstance(outcome, int):
        sys.exit(outcome)
    from broker.host.process_hardening import lock_memory

    memory = lock_memory()  # before a secret can be read; see broker.host.process_hardening
    from broker.cli.app import main

    sys.exit(main(args, memory=memory, config=outcome.config))  # the config's table, when it was read already
