"""One issue's transaction: its session's credentials minted, recorded, written, and delivered or rolled back.

``Issuing`` is built once from its inputs (the broker, the manifest, the
decision, the session id and end, the session directory, the interception)
with each credential's ``MintContext`` made once for both the reservation
and the mint; ``broker.core.issuing`` decides before it and runs it.

The order keeps every minted credential reachable (each credential's steps
are ``broker.core.credential.mint``): the store records a credential as
``minting`` (with the part of its reference known in advance) before the
provider call and ``active`` with its reference right after, the log records
the issuance, then its files are written. A credential the provider returned
but that cannot be recorded, or that fails a check after minting, is withheld
(``broker.core.credential.withholding``): logged with its fingerprint and
revoked at once, or kept ``pending`` for ``sweep``. Before all that, each
provider reserves room to revoke what it will mint
(``broker.core.credential.reserving``); without room the issue is denied like
a policy denial. Anything that fails rolls the whole session back
(``abort``, ``rollback``): exit 4 once anything was minted.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from datetime import timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, NoReturn

from broker.core.broker import Broker, new_session_id, preload_providers
from broker.core.credential.mint import Minting
from broker.core.credential.reserving import Reservation
from broker.core.credential.revoke import revoke_credential
from broker.core.credential.withholding import cause_text
from broker.core.inputs.manifest import Manifest
from broker.core.inputs.policy import Decision
from broker.core.session_document import IssuedCredential, SessionDocument
from broker.core.store.interface import ApprovalRecord, SessionRecord
from broker.core.store.states import SETTLED_CREDENTIAL_STATES, CredentialState, SessionState
from broker.host.sessiondir import SOCKET_NAME, SessionDirectory
from broker.host.signals import signals_blocked
from broker.vocab.errors import (
    BrokerError,
    InternalError,
    Interrupted,
    IssueRolledBack,
    ProviderError,
    UnknownRequest,
)
from broker.vocab.time import iso
from broker.vocab.tracing import carried
from providers.base import CredentialRequest, MintedCredential

if TYPE_CHECKING:  # an Interception is handed in by a caller running the proxy, which imports its machinery
    from broker.core.credential.proxied import Interception
    from broker.core.delegation.coverage import Delegated
    from broker.core.issuing import DelegationSocket


class Issuing(Minting):
    """One issue: its session's credentials minted, recorded, written, and delivered or rolled back."""

    def __init__(
        self,
        broker: Broker,
        manifest: Manifest,
        decision: Decision,
        interception: Interception | None,
        approved: ApprovalRecord | None = None,
        delegated: Delegated | None = None,
        delegation: DelegationSocket | None = None,
    ) -> None:
        runtime = broker.runtime
        now = broker.clock().replace(microsecond=0)
        session_id = approved.request if approved else delegated.session_id if delegated else new_session_id()
        expires_at, parent = now + timedelta(seconds=decision.session_ttl), delegated.parent.id if delegated else None
        super().__init__(broker, manifest, decision, session_id, expires_at, parent=parent)
        self.now = now
        self.interception = interception
        self.approved = approved
        self.delegated = delegated
        self.delegation = delegation if decision.delegation.depth > 0 else None
        ancestors = delegated.ancestors if delegated is not None else ()
        sandbox = manifest.sandbox
        self.directory = SessionDirectory(runtime, self.session_id, sandbox.uid, sandbox.gid, ancestors)
        #: Made once: the reservation and the mint tell each provider the same.
        self.contexts = {request.name: self.context(request) for request in manifest.credentials}
        self.pool: ThreadPoolExecutor | None = None

    def begin(self) -> None:
        """The session in the store, ``issuing``, before anything is minted (sweep finds it if this broker
        dies); the providers' SDKs loaded here, before the minting threads use them."""
        manifest = self.manifest
        record = SessionRecord(
            id=self.session_id,
            task=manifest.task,
            requester=str(self.broker.requester),
            state=SessionState.ISSUING,
            created_at=self.now,
            expires_at=self.expires_at,
            dir=str(self.directory.path),
            mount_path=str(manifest.sandbox.mount_path),
            uid=manifest.sandbox.uid,
            gid=manifest.sandbox.gid,
            mounted=self.directory.runtime.mount_per_session and not self.directory.ancestors,
            document=None,
            manifest=manifest.stored(self.decision.network.rule),
            host=self.broker.config.host,
            requester_uid=self.broker.requester.uid,
            parent=self.delegated.parent.id if self.delegated is not None else None,
            delegate_depth=self.decision.delegation.depth,
        )
        if self.approved is None:
            self.broker.store.create_session(record)
        elif not self.broker.store.collect_approval(record):  # one collector wins; the others change nothing
            raise UnknownRequest(f"request {self.session_id} was collected already, or is no longer approved")
        preload_providers(self.broker, {request.provider for request in manifest.credentials})
        self.pool = ThreadPoolExecutor(max_workers=len(manifest.credentials), thread_name_prefix="mint")

    def run(self, reservation: Reservation) -> SessionDocument:
        """Mint every credential at once, write the directory, record and log the session; its document."""
        broker, manifest = self.broker, self.manifest
        assert self.pool is not None
        self.directory.create()
        futures = [self.pool.submit(carried(self.provide), request) for request in manifest.credentials]
        # once the store has what the reserving providers minted, the room is known
        held = zip(manifest.credentials, futures, strict=True)
        wait([future for request, future in held if request.provider in reservation.providers])
        reservation.release()
        wait(futures, return_when=FIRST_EXCEPTION)
        results = [future.result() for future in futures]  # the first failure raises here
        if self.delegation is not None:  # while the directory is the broker's alone: nothing in it can be swapped
            self.delegation.listener = self.directory.bind_socket(self.delegation.owner)
            self.delegation.limits = self.decision.delegation
        document = self.document(results)
        self.directory.write_file("session.json", document.file_content())
        self.directory.seal()
        broker.store.set_session_document(self.session_id, document.to_json())
        broker.store.set_session_state(self.session_id, SessionState.ACTIVE)
        broker.log.append(
            "session.issued",
            session=self.session_id,
            task=manifest.task,
            requester=str(broker.requester),
            expires_at=iso(self.expires_at),
            credentials=[request.name for request, _, _ in results],
            dir=str(self.directory.path),
            **self.lineage(),
        )
        broker.checkpoint()
        return document

    def provide(self, request: CredentialRequest) -> tuple[CredentialRequest, MintedCredential, list[str]]:
        """One credential's whole path: record, mint, record again, log, write its files (or their placeholder)."""
        credential = self.mint(request, self.contexts[request.name])
        self.record(request, credential, **self.lineage())
        if self.interception is not None and request.name in self.manifest.proxied:
            credential = self.interception.hold(request, credential, self.directory.path, self.manifest.network)
        return request, credential, self.directory.write_credential(request.name, credential.files)

    def document(self, results: list[tuple[CredentialRequest, MintedCredential, list[str]]]) -> SessionDocument:
        """The session document (the CA files of proxied credentials are written on the way)."""
        broker, manifest = self.broker, self.manifest
        env: dict[str, str] = {}
        credentials = []
        for request, credential, files in results:
            credentials.append(
                IssuedCredential(
                    name=request.name,
                    provider=request.provider,
                    type=broker.config.providers[request.provider].type_name,
                    expires_at=iso(credential.expires_at),
                    files=tuple(files),
                    scope=dict(credential.scope),
                )
            )
            for key, value in credential.env.items():
                env.setdefault(key, value)
        env["BROKER_SESSION"] = self.session_id
        if self.delegation is not None:  # the thin client in the sandbox asks this session's socket for children
            env["BROKER_SOCKET"] = str(PurePosixPath(manifest.sandbox.mount_path) / SOCKET_NAME)
        proxy_url = None
        if self.interception is not None:  # its CA files and a gateway's proxy credential, with their hints
            delivered = self.interception.deliver(
                self.directory, self.session_id, PurePosixPath(manifest.sandbox.mount_path)
            )
            env.update(delivered.env)
            proxy_url = delivered.proxy_url
        return SessionDocument(
            id=self.session_id,
            task=manifest.task,
            expires_at=iso(self.expires_at),
            dir=str(self.directory.path),
            mount_path=str(PurePosixPath(manifest.sandbox.mount_path)),
            credentials=tuple(credentials),
            env=env,
            host=broker.config.host if broker.store.shared else None,  # only this host touches the directory
            parent=self.delegated.parent.id if self.delegated is not None else None,
            proxy_url=proxy_url,
            limits=self.decision.limits,
        )

    def lineage(self) -> dict[str, str]:
        """``parent`` in the log records of a delegated session."""
        return {"parent": self.delegated.parent.id} if self.delegated is not None else {}

    def abort(self, cause: BaseException) -> NoReturn:
        """Roll back with the stop signals held, then fail: exit 4 once anything was minted."""
        if self.delegation is not None and self.delegation.listener is not None:
            self.delegation.listener.close()  # its directory goes with the rollback
            self.delegation.listener = None
        with signals_blocked():
            if self.pool is not None:
                self.pool.shutdown(wait=True, cancel_futures=True)  # nothing may still be minting while we roll back
            try:
                any_minted, pending = self.rollback(cause)
            except BaseException as failure:  # the store or the log is unusable: sweep finishes the job
                raise IssueRolledBack(
                    f"issue failed ({cause_text(cause)}) and rolling back failed too ({cause_text(failure)});"
                    " run broker sweep: it revokes whatever this session minted"
                ) from None
        if any_minted:
            raise _after_mint(cause, pending) from None
        if isinstance(cause, BrokerError | KeyboardInterrupt | SystemExit):
            raise cause
        raise InternalError(f"issue failed unexpectedly ({type(cause).__name__}); nothing was left behind") from cause

    def rollback(self, cause: BaseException) -> tuple[bool, list[str]]:
        """Revoke whatever was minted, remove the directory, mark the session failed.

        Returns whether anything had been minted and which credentials stay pending.
        A credential still ``minting`` (its provider call ended without an answer
        the broker kept) is looked for at its provider, as ``sweep`` does.
        """
        broker, session_id = self.broker, self.session_id
        requester = str(broker.requester)
        now = broker.clock()
        for record in broker.store.credentials(session_id):
            if record.state in (CredentialState.MINTING, CredentialState.ACTIVE):
                revoke_credential(broker, session_id, self.manifest.task, record, now, reason="rollback")
        with contextlib.suppress(OSError):  # sweep removes orphaned directories
            self.directory.remove()
        broker.store.set_session_state(session_id, SessionState.FAILED)
        records = broker.store.credentials(session_id)
        pending = [r.name for r in records if r.state not in (*SETTLED_CREDENTIAL_STATES, CredentialState.FAILED)]
        reason = cause.message if isinstance(cause, BrokerError) else type(cause).__name__
        broker.log.append(
            "session.revoked",
            session=session_id,
            task=self.manifest.task,
            requester=requester,
            reason=f"issue failed: {reason}",
            pending=pending,
            **self.lineage(),
        )
        return any(r.state != CredentialState.FAILED for r in records), pending


def _after_mint(exc: BaseException, pending: list[str]) -> BrokerError:
    """The exit-4 error once something was minted, made with its final message: what truly became of it."""
    if pending:
        fate = f"rollback left {', '.join(pending)} pending for broker sweep"
    else:
        fate = "what was minted has been rolled back"
    if isinstance(exc, ProviderError):  # the message names the provider's failure already
        return ProviderError(f"{exc.message} ({fate})", retryable=exc.retryable) if pending else exc
    if isinstance(exc, Interrupted):
        return IssueRolledBack(f"interrupted by signal {exc.signum}; {fate}")
    return IssueRolledBack(f"issue failed after minting ({cause_text(exc)}); {fate}")
