"""``python -m broker.cli``: the command line without the console script's fast paths."""

from broker.cli.app import run

run()
