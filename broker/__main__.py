"""``python -m broker``: the same as the ``broker`` console script."""

from broker.entry import run

run()
