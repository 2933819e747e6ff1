"""``issue``: decide, mint, inject, log; and roll everything back when any step fails.

The order keeps every minted credential reachable (each credential's steps
are ``broker.core.credential.mint``): the store records a credential as
``minting`` (with the part of its reference known in advance) before the
provider call and ``active`` with its reference right after, the log records
the issuance, then its files are written. A credential the
provider returned but that cannot be recorded, or that fails a check after
minting, is withheld (``broker.core.withholding``): logged with its fingerprint
and revoked at once, or kept ``pending`` for ``sweep``. Once anything is
minted, ``issue`` either
completes (checkpoint, ``--session-file``, the printed document: ``deliver``)
or revokes everything and fails with exit 4.
Before all that, each provider reserves room to revoke what it will mint
(``broker.core.reserving``); without room the issue is denied like a policy denial.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from broker.core.broker import Broker, new_session_id, preload_providers
from broker.core.credential.mint import mint_one, record_minted
from broker.core.credential.revoke import revoke_credential
from broker.core.manifest import Manifest
from broker.core.policy import Decision, decide
from broker.core.proxied import ca_files, ca_hints, hold_in_proxy, limit_operations, require_proxy
from broker.core.reserving import Reservation, reserved
from broker.core.states import SETTLED_CREDENTIAL_STATES, CredentialState, SessionState
from broker.core.store import SessionRecord
from broker.core.withholding import cause_text
from broker.egress.terminate.plan import Interceptor
from broker.host.sessiondir import SessionDirectory
from broker.host.signals import signals_blocked
from broker.vocab.errors import (
    BadInput,
    BrokerError,
    InternalError,
    Interrupted,
    IssueRolledBack,
    PolicyDenied,
    ProviderError,
)
from broker.vocab.logs import event
from broker.vocab.time import iso
from providers.base import CredentialRequest, MintedCredential

LOG = logging.getLogger("broker.issue")


def check(broker: Broker, manifest: Manifest) -> Decision:
    """The policy decision for ``manifest`` (no side effects)."""
    decision = decide(broker.policy, manifest, broker.requester, broker.config)
    event(
        LOG,
        "policy decision",
        task=manifest.task,
        requester=decision.requester,
        allowed=decision.allowed,
        session_ttl=decision.session_ttl,
        credentials=[c.to_json() for c in decision.credentials],
    )
    return decision


Deliver = Callable[[dict[str, Any]], None]


def issue(
    broker: Broker, manifest: Manifest, deliver: Deliver | None = None, interceptor: Interceptor | None = None
) -> dict[str, Any]:
    """Issue a session for ``manifest``; returns the session document.

    ``deliver`` hands the document to the caller (``--session-file``, stdout)
    while the session can still be rolled back: if it raises, or a signal
    arrives first, every credential is revoked again. ``interceptor`` (the
    session's proxy's) takes the secrets of ``inject: proxy`` credentials and
    the effective operations (``broker.core.proxied``).
    """
    require_proxy(manifest, interceptor)
    decision = check(broker, manifest)
    if not decision.allowed:
        broker.log.append(
            "session.denied",
            session=None,
            task=manifest.task,
            requester=str(broker.requester),
            credentials=[c.to_json() for c in decision.credentials],
            reasons=list(decision.reasons),
        )
        raise PolicyDenied(decision.denial_message(), decision.reasons)
    limit_operations(interceptor, decision)
    _check_sandbox_owner(manifest)
    broker.log.head()  # a log that cannot take records (torn, unreadable) fails the issue before anything is minted
    runtime = broker.runtime
    now = broker.clock().replace(microsecond=0)
    expires_at = now + timedelta(seconds=decision.session_ttl)
    session_id = new_session_id()
    directory = SessionDirectory(runtime, session_id, manifest.sandbox.uid, manifest.sandbox.gid)
    with reserved(broker, manifest, decision, session_id, expires_at, now) as reservation:
        lock = broker.session_lock(session_id)
        lock.acquire()  # held until the session is complete or rolled back: sweep leaves it alone
        try:
            _record_session(broker, manifest, session_id, now, expires_at, directory)
            return _issue_locked(
                broker, manifest, decision, session_id, expires_at, directory, deliver, interceptor, reservation
            )
        finally:
            lock.release()


def _record_session(
    broker: Broker,
    manifest: Manifest,
    session_id: str,
    now: datetime,
    expires_at: datetime,
    directory: SessionDirectory,
) -> None:
    broker.store.create_session(
        SessionRecord(
            id=session_id,
            task=manifest.task,
            requester=str(broker.requester),
            state=SessionState.ISSUING,
            created_at=now,
            expires_at=expires_at,
            dir=str(directory.path),
            mount_path=str(manifest.sandbox.mount_path),
            uid=manifest.sandbox.uid,
            gid=manifest.sandbox.gid,
            mounted=directory.runtime.mount_per_session,
            document=None,
            manifest={"json": manifest.source_is_json, "text": manifest.source},
            host=broker.config.host,
        )
    )


def _issue_locked(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    session_id: str,
    expires_at: datetime,
    directory: SessionDirectory,
    deliver: Deliver | None,
    interceptor: Interceptor | None = None,
    reservation: Reservation | None = None,
) -> dict[str, Any]:
    preload_providers(broker, {request.provider for request in manifest.credentials})
    pool = ThreadPoolExecutor(max_workers=len(manifest.credentials), thread_name_prefix="mint")
    try:
        directory.create()
        futures = [
            pool.submit(
                _mint_and_inject, broker, manifest, decision, request, session_id, expires_at, directory, interceptor
            )
            for request in manifest.credentials
        ]
        if reservation is not None:  # once the store has what the reserving providers minted, the room is known
            held = zip(manifest.credentials, futures, strict=True)
            wait([future for request, future in held if request.provider in reservation.providers])
            reservation.release()
        wait(futures, return_when=FIRST_EXCEPTION)
        results = [future.result() for future in futures]  # the first failure raises here
        minted = [(request, credential) for request, credential, _ in results]
        files = {request.name: written for request, _, written in results}
        document = session_document(broker, manifest, session_id, expires_at, directory, minted, files)
        if interceptor is not None and interceptor.terminates:
            for name, data in ca_files(interceptor).items():
                directory.write_file(name, data)
            document["env"].update(ca_hints(manifest.sandbox.mount_path))
        directory.write_file("session.json", json.dumps(document, indent=2).encode() + b"\n")
        directory.seal()
        broker.store.set_session_document(session_id, document)
        broker.store.set_session_state(session_id, SessionState.ACTIVE)
        broker.log.append(
            "session.issued",
            session=session_id,
            task=manifest.task,
            requester=str(broker.requester),
            expires_at=iso(expires_at),
            credentials=[r.name for r, _ in minted],
            dir=str(directory.path),
        )
        broker.checkpoint()
        if deliver is not None:
            deliver(document)
        return document
    except BaseException as exc:
        with signals_blocked():
            pool.shutdown(wait=True, cancel_futures=True)  # nothing may still be minting while we roll back
            try:
                any_minted, pending = _roll_back(broker, manifest, session_id, directory, exc)
            except BaseException as failure:  # the store or the log is unusable: sweep finishes the job
                raise IssueRolledBack(
                    f"issue failed ({cause_text(exc)}) and rolling back failed too ({cause_text(failure)});"
                    " run broker sweep: it revokes whatever this session minted"
                ) from None
        if any_minted:
            raise _after_mint(exc, pending) from None
        if isinstance(exc, BrokerError | KeyboardInterrupt | SystemExit):
            raise
        raise InternalError(f"issue failed unexpectedly ({type(exc).__name__}); nothing was left behind") from exc


def _after_mint(exc: BaseException, pending: list[str]) -> BrokerError:
    """The exit-4 error once something was minted; its message says truly what became of it."""
    if pending:
        fate = f"rollback left {', '.join(pending)} pending for broker sweep"
    else:
        fate = "what was minted has been rolled back"
    if isinstance(exc, ProviderError):  # the message names the provider's failure already
        if pending:
            exc.message += f" ({fate})"
        return exc
    if isinstance(exc, Interrupted):
        return IssueRolledBack(f"interrupted by signal {exc.signum}; {fate}")
    return IssueRolledBack(f"issue failed after minting ({cause_text(exc)}); {fate}")


def _check_sandbox_owner(manifest: Manifest) -> None:
    if os.geteuid() != 0 and (manifest.sandbox.uid, manifest.sandbox.gid) != (os.getuid(), os.getgid()):
        raise BadInput(
            f"sandbox.uid/gid {manifest.sandbox.uid}/{manifest.sandbox.gid}: only root can issue files"
            " owned by another user"
        )


def _mint_and_inject(
    broker: Broker,
    manifest: Manifest,
    decision: Decision,
    request: CredentialRequest,
    session_id: str,
    expires_at: datetime,
    directory: SessionDirectory,
    interceptor: Interceptor | None = None,
) -> tuple[CredentialRequest, MintedCredential, list[str]]:
    """One credential's whole path: record, mint, record again, log, write its files (or their placeholder)."""
    credential = mint_one(broker, manifest, decision, request, session_id, expires_at)
    record_minted(broker, manifest, decision, request, credential, session_id)
    if interceptor is not None and request.name in manifest.proxied:
        credential = hold_in_proxy(broker.config, request, credential, interceptor)
    return request, credential, directory.write_credential(request.name, credential.files)


def _roll_back(
    broker: Broker, manifest: Manifest, session_id: str, directory: SessionDirectory, cause: BaseException
) -> tuple[bool, list[str]]:
    """Revoke whatever was minted, remove the directory, mark the session failed.

    Returns whether anything had been minted and which credentials stay pending.
    A credential still ``minting`` (its provider call ended without an answer
    the broker kept) is looked for at its provider, as ``sweep`` does.
    """
    requester = str(broker.requester)
    now = broker.clock()
    for record in broker.store.credentials(session_id):
        if record.state in (CredentialState.MINTING, CredentialState.ACTIVE):
            revoke_credential(broker, session_id, manifest.task, record, now, reason="rollback")
    with contextlib.suppress(OSError):  # sweep removes orphaned directories
        directory.remove()
    broker.store.set_session_state(session_id, SessionState.FAILED)
    records = broker.store.credentials(session_id)
    pending = [r.name for r in records if r.state not in (*SETTLED_CREDENTIAL_STATES, CredentialState.FAILED)]
    reason = cause.message if isinstance(cause, BrokerError) else type(cause).__name__
    broker.log.append(
        "session.revoked",
        session=session_id,
        task=manifest.task,
        requester=requester,
        reason=f"issue failed: {reason}",
        pending=pending,
    )
    return any(r.state != CredentialState.FAILED for r in records), pending


def session_document(
    broker: Broker,
    manifest: Manifest,
    session_id: str,
    expires_at: Any,
    directory: SessionDirectory,
    minted: list[tuple[CredentialRequest, MintedCredential]],
    files: dict[str, list[str]],
) -> dict[str, Any]:
    env: dict[str, str] = {}
    credentials = []
    for request, credential in minted:
        provider_type = broker.config.providers[request.provider].type_name
        credentials.append(
            {
                "name": request.name,
                "provider": request.provider,
                "type": provider_type,
                "expires_at": iso(credential.expires_at),
                "files": files[request.name],
                "scope": dict(credential.scope),
            }
        )
        for key, value in credential.env.items():
            env.setdefault(key, value)
    env["BROKER_SESSION"] = session_id
    document: dict[str, Any] = {
        "session": session_id,
        "task": manifest.task,
        "expires_at": iso(expires_at),
        "dir": str(directory.path),
        "mount_path": str(PurePosixPath(manifest.sandbox.mount_path)),
        "credentials": credentials,
        "env": env,
    }
    if broker.store.shared:
        document["host"] = broker.config.host  # only this host touches the directory
    return document
