"""Rows read from the session store, checked like input before they become records.

A shared store (PostgreSQL) can be written by anyone holding its
credentials, and a file store can be edited or damaged, so a row is not
trusted because the broker once wrote it: its session id must have the shape
of one (it names a directory and a lock), its state must be a known one, its
host a host name, and every column the type its record holds. A row that
fails is a ``MalformedRow``: the store skips it (the rest of its answer
stands), notes it in its ``MalformedRows`` (bounded), and says so once per
row in the operator log; ``sweep`` reports what it met (``malformed``) and
records each row once in the issuance log (``store.malformed``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from broker.core.inputs.config import HOST_NAME
from broker.core.store.interface import ApprovalRecord, CredentialRecord, SessionRecord
from broker.core.store.states import ApprovalState, CredentialState, SessionState
from broker.vocab.fields import describe, shown
from broker.vocab.session_ids import is_session_id
from broker.vocab.time import parse_iso

LOG = logging.getLogger("broker.store")
#: Credential names as the broker writes them: the manifest's, and "~N" for a renewal's retired generation.
CREDENTIAL_NAME = re.compile(r"[a-z0-9][a-z0-9_~-]{0,63}")
MAX_TEXT = 4096  # task, requester, paths: longer is no value the broker wrote
MAX_ID = 2**32 - 1
SHOWN = 80  # characters of a bad row's key kept in reports and records
MAX_NOTED = 256  # malformed rows one store keeps for its reports; more are skipped all the same

Record = TypeVar("Record", SessionRecord, CredentialRecord, ApprovalRecord)


@dataclass(frozen=True)
class MalformedRow:
    """A row the store skipped: which table, which row (bounded), what is wrong with it."""

    table: str
    key: str  # the row's key as read (for ``sessions`` the id), cut to SHOWN characters
    problems: tuple[str, ...]
    digest: str  # SHA-256 of the whole key as read: one row, however long its key
    session_id: str | None  # a ``sessions`` row's key when it is a well-formed id (what it names is left alone)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "row": self.key, "digest": self.digest, "problems": list(self.problems)}


class Malformed(Exception):
    """Raised while a row is read; the store turns it into a ``MalformedRow``."""


class MalformedRows:
    """The malformed rows one store met, each with when it was last met; the MAX_NOTED latest kept (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, tuple[int, MalformedRow]] = {}
        self._count = 0

    def note(self, row: MalformedRow) -> None:
        with self._lock:
            first = row.digest not in self._rows
            if first and len(self._rows) >= MAX_NOTED:  # the longest unseen goes: the newest is always known
                del self._rows[min(self._rows, key=lambda digest: self._rows[digest][0])]
            self._count += 1
            self._rows[row.digest] = (self._count, row)
        if first:
            LOG.warning(
                "skipped a malformed row of the session store",
                extra={"broker_fields": {"event": "store.malformed", **row.to_json()}},
            )

    def mark(self) -> int:
        """A point to ask ``since`` from."""
        with self._lock:
            return self._count

    def since(self, mark: int) -> list[MalformedRow]:
        """The rows met after ``mark``."""
        with self._lock:
            return [row for seen, row in self._rows.values() if seen > mark]


def unknown_states(mark: str) -> tuple[str, list[str]]:
    """SQL that holds for a state no broker writes, and its arguments (``mark``: the driver's placeholder).

    Written as the open ranges around the known states rather than ``NOT IN``,
    so the state index answers it without reading every session a store keeps.
    """
    known = sorted(state.value for state in SessionState)
    ranges = [f"state < {mark}", *[f"(state > {mark} AND state < {mark})"] * (len(known) - 1), f"state > {mark}"]
    args = [known[0], *[value for pair in itertools.pairwise(known) for value in pair], known[-1]]
    return f"({' OR '.join(ranges)})", args


def keep(rows: Iterable[Mapping[str, Any]], read: Any, noted: MalformedRows, **options: Any) -> list[Any]:
    """``read(row, **options)`` of each row; the malformed ones noted and left out."""
    records = []
    for row in rows:
        record = read(row, **options)
        if isinstance(record, MalformedRow):
            noted.note(record)
        else:
            records.append(record)
    return records


def session_record(row: Mapping[str, Any], *, shared: bool) -> SessionRecord | MalformedRow:
    """A ``sessions`` row (column name -> value) as a record, or what is wrong with it."""
    raw_id = row.get("id")
    key = raw_id if isinstance(raw_id, str) else repr(raw_id)
    problems = []
    if not (isinstance(raw_id, str) and is_session_id(raw_id)):
        problems.append(f"id {shown(key)} is not a session id")
    state = _state(row.get("state"), SessionState, problems)
    host = row.get("host")
    if not (isinstance(host, str) and (HOST_NAME.fullmatch(host) or (host == "" and not shared))):
        problems.append(f"host {_value(host)} is not a host name")
    record = None
    try:
        record = SessionRecord(
            id=key,
            task=_text(row, "task"),
            requester=_text(row, "requester"),
            state=state or SessionState.FAILED,
            created_at=_moment(row, "created_at"),
            expires_at=_moment(row, "expires_at"),
            dir=_text(row, "dir"),
            mount_path=_text(row, "mount_path"),
            uid=_number(row, "uid"),
            gid=_number(row, "gid"),
            mounted=_flag(row, "mounted"),
            document=_json(row, "document"),
            exec_bound=_flag(row, "exec_bound"),
            manifest=_json(row, "manifest"),
            host=host if isinstance(host, str) else "",
            requester_uid=None if row.get("requester_uid") is None else _number(row, "requester_uid"),
            parent=_parent(row),
            delegate_depth=_number(row, "delegate_depth") if row.get("delegate_depth") is not None else 0,
        )
    except Malformed as exc:
        problems.append(str(exc))
    if problems or record is None:
        return _malformed("sessions", key, problems, key if is_session_id(key) else None)
    return record


def _parent(row: Mapping[str, Any]) -> str | None:
    value = row.get("parent")
    if value is None:
        return None
    if not (isinstance(value, str) and is_session_id(value)):
        raise Malformed(f"parent {_value(value)} is not a session id")
    return value


def approval_record(row: Mapping[str, Any], *, shared: bool) -> ApprovalRecord | MalformedRow:
    """An ``approvals`` row as a record, or what is wrong with it (its request id names a session)."""
    raw_id = row.get("id")
    key = raw_id if isinstance(raw_id, str) else repr(raw_id)
    problems = []
    if not (isinstance(raw_id, str) and is_session_id(raw_id)):
        problems.append(f"id {shown(key)} is not a session id")
    state = _state(row.get("state"), ApprovalState, problems)
    host = row.get("host")
    if not (isinstance(host, str) and (HOST_NAME.fullmatch(host) or (host == "" and not shared))):
        problems.append(f"host {_value(host)} is not a host name")
    record = None
    try:
        approvers = json.loads(_text(row, "approvers"))
        if not (
            isinstance(approvers, list)
            and all(isinstance(group, list) and all(isinstance(t, str) for t in group) for group in approvers)
        ):
            raise Malformed("approvers is not a list of lists of approvers")
        decided = row.get("decided_at")
        record = ApprovalRecord(
            request=key,
            task=_text(row, "task"),
            requester=_text(row, "requester"),
            requester_uid=None if row.get("requester_uid") is None else _number(row, "requester_uid"),
            state=state or ApprovalState.EXPIRED,
            digest=_text(row, "digest"),
            summary=_json(row, "summary") or {},
            approvers=tuple(tuple(group) for group in approvers),
            timeout=_number(row, "timeout"),
            created_at=_moment(row, "created_at"),
            expires_at=_moment(row, "expires_at"),
            host=host if isinstance(host, str) else "",
            decided_at=None if decided is None else _moment(row, "decided_at"),
            decided_by=None if row.get("decided_by") is None else _text(row, "decided_by"),
            decided_by_uid=None if row.get("decided_by_uid") is None else _number(row, "decided_by_uid"),
            reason=None if row.get("reason") is None else _text(row, "reason"),
        )
    except (Malformed, ValueError) as exc:
        problems.append(str(exc) if isinstance(exc, Malformed) else "approvers is not JSON")
    if problems or record is None:
        return _malformed("approvals", key, problems, None)
    return record


def credential_record(row: Mapping[str, Any]) -> CredentialRecord | MalformedRow:
    """A ``credentials`` row as a record, or what is wrong with it."""
    session_id, name = row.get("session_id"), row.get("name")
    key = f"{session_id if isinstance(session_id, str) else repr(session_id)}/{name}"
    problems = []
    if not (isinstance(session_id, str) and is_session_id(session_id)):
        problems.append(f"session id {_value(session_id)} is not a session id")
    if not (isinstance(name, str) and CREDENTIAL_NAME.fullmatch(name)):
        problems.append(f"name {_value(name)} is not a credential name")
    state = _state(row.get("state"), CredentialState, problems)
    record = None
    try:
        reference = _reference(row.get("reference"))
        expires = row.get("expires_at")
        record = CredentialRecord(
            session_id=str(session_id),
            name=str(name),
            provider=_text(row, "provider"),
            type=_text(row, "type"),
            state=state or CredentialState.FAILED,
            reference=reference,
            scope=_json(row, "scope") or {},
            expires_at=None if expires is None else _moment(row, "expires_at"),
            fingerprint=None if row.get("fingerprint") is None else _text(row, "fingerprint"),
        )
    except Malformed as exc:
        problems.append(str(exc))
    if problems or record is None:
        return _malformed("credentials", key, problems, None)
    return record


# -- one column each ---------------------------------------------------------------------


def _malformed(table: str, key: str, problems: list[str], session_id: str | None) -> MalformedRow:
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return MalformedRow(table, key[:SHOWN], tuple(problems), digest, session_id)


def _value(value: object) -> str:
    return shown(value) if isinstance(value, str) else describe(value)


def _state(value: object, states: Any, problems: list[str]) -> Any:
    try:
        return states(value) if isinstance(value, str) else states(None)
    except ValueError:
        problems.append(f"state {_value(value)} is not one the broker knows")
        return None


def _text(row: Mapping[str, Any], column: str) -> str:
    value = row.get(column)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise Malformed(f"{column} is {describe(value)}, not text of at most {MAX_TEXT} characters")
    return value


def _number(row: Mapping[str, Any], column: str) -> int:
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ID:
        raise Malformed(f"{column} is not a user or group id")
    return value


def _flag(row: Mapping[str, Any], column: str) -> bool:
    value = row.get(column)
    if value not in (0, 1):  # SQLite's 0/1, PostgreSQL's booleans
        raise Malformed(f"{column} is not a boolean")
    return bool(value)


def _moment(row: Mapping[str, Any], column: str) -> datetime:
    value = row.get(column)
    try:
        moment = parse_iso(value) if isinstance(value, str) else value
    except ValueError:
        moment = None
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        raise Malformed(f"{column} is not a time")
    return moment.astimezone(UTC)


def _reference(value: object) -> Any:
    """Any JSON: a reference no provider can read still reaches the provider, whose refusal leaves the credential
    pending for ``sweep`` (reported, not forgotten), rather than the credential being skipped."""
    try:
        return json.loads(value) if isinstance(value, str) else _fail("reference is not JSON")
    except ValueError:
        return _fail("reference is not JSON")


def _fail(problem: str) -> Any:
    raise Malformed(problem)


def _json(row: Mapping[str, Any], column: str) -> dict[str, Any] | None:
    value = row.get(column)
    if value is None or value == "":
        return None
    try:
        document = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise Malformed(f"{column} is not a JSON object")
    return document
