"""An open ``Broker`` for one command, closed (its checkpoint signed) when the command is done."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from broker.core.broker import Broker
from broker.core.inputs.config import Config
from broker.core.store.interface import SessionStore
from broker.vocab.errors import BrokerError


@contextlib.contextmanager
def open_broker(config: Config, store: SessionStore | None = None, *, teardown: bool = False) -> Iterator[Broker]:
    """A ``Broker`` for one command (on ``store`` when the command opened it already), closed (its checkpoint
    signed) when the command is done; ``teardown``: a sweep's, which the reserve's room is given to first."""
    try:
        broker = Broker.open(config, store, teardown=teardown)
    except BaseException:
        if store is not None:
            store.close()
        raise
    try:
        yield broker
    except BaseException:
        # The command's own failure is what to report; a checkpoint that fails now is signed by the next command.
        with contextlib.suppress(BrokerError):
            broker.close()
        raise
    broker.close()
