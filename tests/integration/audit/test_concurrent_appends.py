"""The issuance log under 32 processes appending and checkpointing at once: one gapless chain, nothing lost."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from broker.audit.keys import load_or_create_keys
from broker.audit.log import IssuanceLog
from tests.fixtures.logchain import assert_chain


def _append_many(state_dir: str, worker: int, count: int) -> None:
    log = IssuanceLog(
        Path(state_dir), load_or_create_keys(Path(state_dir) / "audit.key", Path(state_dir) / "fingerprint.key")
    )
    for index in range(count):
        log.append("credential.issued", session=f"s-{worker}", task="t", requester="ci", n=index)
    log.checkpoint("ci")


def test_32_concurrent_processes_keep_one_chain(tmp_path: Path) -> None:
    load_or_create_keys(tmp_path / "audit.key", tmp_path / "fingerprint.key")
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_append_many, args=(str(tmp_path), n, 10)) for n in range(32)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    items = assert_chain(tmp_path / "issuance.jsonl")
    issued = [(r["session"], r["n"]) for r in items if r["event"] == "credential.issued"]
    assert len(issued) == len(set(issued)) == 320
    assert sum(1 for r in items if r["event"] == "checkpoint") == 32
