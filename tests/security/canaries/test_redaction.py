"""Canaries in the ``Secret`` type: a secret stays redacted in exception messages, tracebacks (with locals), log
records and the ``repr`` of the frozen dataclasses that carry it, and cannot be copied out through ``asdict``,
``deepcopy`` or pickle.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import pickle
import traceback
from datetime import UTC, datetime

import pytest

from broker.vocab.errors import ProviderError
from broker.vocab.logs import JsonFormatter, TextFormatter, event
from broker.vocab.secret import Secret
from providers.base import MintedCredential, RevokeTarget
from tests.security.canaries.scan import canary


def _raise_with(secret: Secret) -> None:
    token = secret  # a local holding the secret, for tracebacks that show locals
    raise ValueError("mint failed", token, {"token": token})


def _chained_error(secret: Secret) -> ProviderError:
    """A ProviderError raised from a ValueError carrying ``secret``; no frame holds the revealed value."""
    try:
        try:
            _raise_with(secret)
        except ValueError as inner:
            raise ProviderError(f"vault x: token create failed for {secret}") from inner
    except ProviderError as exc:
        return exc
    raise AssertionError("not raised")


def test_a_secret_in_exception_args_stays_redacted_in_messages_and_tracebacks() -> None:
    value = canary("exception")
    caught = _chained_error(Secret(value))
    texts = [
        str(caught),
        repr(caught),
        caught.message,
        f"{caught}",
        str(caught.__cause__),
        repr(caught.__cause__),
        "".join(traceback.format_exception(caught)),
        "".join(traceback.TracebackException.from_exception(caught, capture_locals=True).format()),
    ]
    for text in texts:
        assert value not in text
    assert "Secret(***)" in texts[6]


def test_a_secret_in_a_log_record_stays_redacted() -> None:
    value = canary("log")
    logger = logging.getLogger("broker.test-canaries")
    record = logger.makeRecord(logger.name, logging.INFO, __file__, 1, "minted %s", (Secret(value),), None)
    record.broker_fields = {"token": Secret(value), "nested": {"token": Secret(value)}}
    for formatter in (TextFormatter(), JsonFormatter(), logging.Formatter()):
        assert value not in formatter.format(record)
    handler_output: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            handler_output.append(TextFormatter().format(record))

    collector = Collect()
    logger.addHandler(collector)
    logger.setLevel(logging.INFO)
    try:
        event(logger, "minted", token=Secret(value))
        try:
            raise RuntimeError(Secret(value))
        except RuntimeError:
            logger.exception("failed with %r", Secret(value))
    finally:
        logger.removeHandler(collector)
    assert handler_output and all(value not in line for line in handler_output)


def test_frozen_dataclasses_carrying_secrets_never_show_them() -> None:
    value = canary("dataclass")
    now = datetime.now(UTC)
    credential = MintedCredential(
        reference={"accessor": "acc-1"},
        secret=Secret(value),
        files={"token": Secret(value), "config": "region = us-east-1\n"},
        expires_at=now,
        scope={"policies": ["ci-read"]},
        env={"VAULT_ADDR": "http://127.0.0.1:8200"},
        revoke_secret=Secret(value),
    )
    target = RevokeTarget(name="kv", reference={"accessor": "acc-1"}, expires_at=now, revoke_secret=Secret(value))
    for item in (credential, target):
        texts = [repr(item), str(item), f"{item}", f"{item!r}", "%s" % (item,), json.dumps(item, default=repr)]  # noqa: UP031
        for text in texts:
            assert value not in text
            assert "Secret(***)" in text
        with pytest.raises(TypeError):  # no copying the secret out through asdict/deepcopy or pickle
            dataclasses.asdict(item)
        with pytest.raises(TypeError):
            pickle.dumps(item)
    assert value not in json.dumps({"s": Secret(value)}, default=str)
    assert base64.b64encode(value.encode()).decode() not in repr(credential)
