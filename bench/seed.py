"""Seed sessions for the sweep benchmark through the broker's own Python API (not the CLI).

    python -m bench.seed CONFIG TASK COUNT

Opens one ``Broker`` and calls ``broker.core.issuing.issue`` COUNT times in a loop,
exactly what ``broker issue`` does minus interpreter start, imports and
config loading per session. Provider refusals are counted and retried (bounded). Prints
``{"issued": N, "errors": {message: count}, "seconds": S}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from broker.core.broker import Broker
from broker.core.inputs.config import load_config
from broker.core.inputs.manifest import load_manifest
from broker.core.issuing import issue
from broker.vocab.errors import BrokerError


def main(argv: list[str]) -> int:
    config_file, task_file, count = argv[0], argv[1], int(argv[2])
    config = load_config(Path(config_file))
    manifest = load_manifest(task_file, config)
    start = time.perf_counter()
    broker = Broker.open(config)
    issued = 0
    errors: dict[str, int] = {}
    try:
        while issued < count and sum(errors.values()) < max(10, count // 10):
            try:
                issue(broker, manifest)
            except BrokerError as exc:  # e.g. Vault refusing a 1 s token on a loaded machine: try again
                errors[exc.message[:160]] = errors.get(exc.message[:160], 0) + 1
                continue
            issued += 1
    finally:
        broker.close()
    print(json.dumps({"issued": issued, "errors": errors, "seconds": round(time.perf_counter() - start, 3)}))
    return 0 if issued == count else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
