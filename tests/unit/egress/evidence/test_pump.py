"""One evidence pump for many sessions' writers: a gateway's thousand sessions cost one writer thread.

Each session's records reach the log in their own order, under one chain,
sharing the pump's batches; closing one session's writer writes its last
records and leaves the others running; a writer of its own (``broker
exec``'s) ends its thread with it.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from broker.audit.keys import load_or_create_keys
from broker.audit.log import IssuanceLog
from broker.egress.evidence.pump import EvidencePump
from broker.egress.evidence.writer import EvidenceWriter

pytestmark = pytest.mark.unit


def log_of(tmp_path: Path) -> IssuanceLog:
    return IssuanceLog(tmp_path, load_or_create_keys(tmp_path / "audit.key", tmp_path / "fp.key"))


def record(number: int) -> dict[str, object]:
    return {"method": "GET", "host": "api.example:443", "path": f"/{number}", "decision": "allowed"}


def test_many_sessions_share_one_pump_and_each_keeps_its_order(tmp_path: Path) -> None:
    log = log_of(tmp_path)
    pump = EvidencePump(log)
    threads = threading.active_count()
    writers = [
        EvidenceWriter(log, session=f"s-{index:012d}", task="t", requester="r", pump=pump) for index in range(50)
    ]
    assert threading.active_count() == threads  # no thread of their own
    for number in range(20):
        for writer in writers:
            writer.submit(record(number))
    assert writers[0].close() == 0
    assert writers[0].written == 20
    for writer in writers[1:]:
        writer.submit(record(20))
        assert writer.close() == 0
    pump.close()
    records = [json.loads(line) for line in log.path.read_text().splitlines()]
    lines = [r for r in records if r["event"] == "egress.request"]
    by_session: dict[str, list[str]] = {}
    for line in lines:
        by_session.setdefault(line["session"], []).append(line["path"])
    assert by_session["s-000000000000"] == [f"/{n}" for n in range(20)]
    assert all(paths == [f"/{n}" for n in range(21)] for s, paths in by_session.items() if s != "s-000000000000")
    assert len(lines) == 20 + 49 * 21
    assert sum(writer.batches for writer in writers) < len(lines)  # batched, not one append each


def test_a_writer_of_its_own_ends_its_thread_with_it(tmp_path: Path) -> None:
    log = log_of(tmp_path)
    writer = EvidenceWriter(log, session="s-aaaaaaaaaaaa", task="t", requester="r")
    writer.submit(record(1))
    assert writer.close() == 0 and writer.written == 1
    assert not any(thread.name == "egress-evidence" for thread in threading.enumerate())
