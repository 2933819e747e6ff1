"""Canaries in the warm-up threads: a provider whose warm-up fails with a secret in its error never logs it.

Warm-up runs in threads of its own and reports a failure at DEBUG only (the
call that needs the provider reports it properly); the record names the
provider and the error's type, never its message, which a provider's SDK may
fill with what it was sent. The provider here is a stand-in whose ``warm_up``
raises exactly such an error (the real providers' errors carry no secret).
"""

from __future__ import annotations

import logging
import secrets
import threading
from types import SimpleNamespace
from typing import Any, cast

import pytest

from broker.core.inputs.config import Config
from broker.core.warming import warm_up
from broker.vocab.errors import ProviderError
from broker.vocab.logs import JsonFormatter, TextFormatter


class Leaky:
    """A provider whose warm-up (or preload) fails with its token in the error message."""

    warm_first = False

    def __init__(self, name: str, token: str, where: str) -> None:
        self.name, self.token, self.where = name, token, where

    def preload(self, minting: bool) -> None:
        if self.where == "preload":
            raise ImportError(f"cannot load with {self.token}")

    def warm_up(self, minting: bool) -> None:
        raise ProviderError(f"vault {self.name}: warm-up failed for token {self.token}")


@pytest.mark.parametrize("where", ["preload", "warm_up"])
def test_a_failed_warm_up_logs_at_debug_without_the_secret_in_its_error(where: str) -> None:
    token = "hvs.CANARY" + secrets.token_hex(12)
    logger = logging.getLogger("broker.warm")
    seen: list[str] = []
    done = threading.Event()

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.extend(formatter.format(record) for formatter in (TextFormatter(), JsonFormatter()))
            done.set()

    collector = Collect()
    old_level = logger.level
    logger.addHandler(collector)
    logger.setLevel(logging.DEBUG)
    try:
        config = cast(Config, SimpleNamespace(providers={"kv": cast(Any, Leaky("kv", token, where))}))
        warm_up(config, ["kv"], minting=True)
        assert done.wait(60), "the warm-up thread reported nothing"
    finally:
        logger.removeHandler(collector)
        logger.setLevel(old_level)
    assert any("warm-up failed" in line and "kv" in line for line in seen), seen
    assert all(token not in line for line in seen)
