"""Operator logging to stderr: what was decided and which provider calls were made, never a secret.

The core logs through ``event(logger, message, **fields)``; the CLI chooses
``--verbose`` (INFO, else WARNING) and ``--log-format text|json``. Fields are
non-secret by construction (names, scopes, references, timings); a ``Secret``
passed by mistake renders redacted.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

ROOT = "broker"


def event(logger: logging.Logger, message: str, **fields: Any) -> None:
    logger.info(message, extra={"broker_fields": fields})


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "broker_fields", {})
        extra = " ".join(f"{key}={_text(value)}" for key, value in fields.items())
        return f"broker: {record.levelname.lower()}: {record.getMessage()}" + (f" {extra}" if extra else "")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "broker_fields", {}),
        }
        return json.dumps(document, default=str, sort_keys=False)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value if value and " " not in value else json.dumps(value)
    return json.dumps(value, default=str, separators=(",", ":"))


def configure(verbose: bool, fmt: str) -> None:
    logger = logging.getLogger(ROOT)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.formatter.converter = __import__("time").gmtime  # type: ignore[union-attr]
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    logger.propagate = False
