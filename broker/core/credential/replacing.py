"""A file-delivered credential replaced by a new one: the step ``renew`` and a running exec's projected tokens share.

Under the session lock the caller holds: the current record is renamed
``<name>~<n>`` (it stays, active, until revoked, so a crash forgets nothing),
a new credential is minted for at most what the session has left and
recorded (``credential.issued`` with ``renewal_of``), its files replace the
old ones in the session directory (each renamed over the old: a reader sees
the old secret or the new, never half of either), and the old credential is
revoked (``reason: renewed``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from broker.core.credential.mint import Minting
from broker.core.credential.revoke import revoke_credential
from broker.core.store.interface import CredentialRecord
from broker.core.store.states import CredentialState
from broker.host.sessiondir import SessionDirectory
from providers.base import CredentialRequest, MintedCredential


@dataclass(frozen=True)
class Replaced:
    credential: MintedCredential  # the new one
    retired: str  # the old one's name now
    outcome: CredentialState  # how its revocation ended


def replace_in_files(
    minting: Minting,
    directory: SessionDirectory,
    request: CredentialRequest,
    old: CredentialRecord,
    *,
    generation: int,
    remaining: int,
) -> Replaced:
    """Replace ``old`` (the active record of ``request``) by a new credential of generation ``generation``, minted
    for at most ``remaining`` seconds, in the store, the log and ``directory``; then revoke ``old``."""
    broker, session_id = minting.broker, minting.session_id
    retired = f"{old.name}~{generation}"
    broker.store.retire_credential(session_id, old.name, retired)
    broker.keepsafe.rename(session_id, old.name, retired)
    credential = minting.mint(request, minting.context(request, ttl_cap=remaining, generation=generation))
    minting.record(request, credential, renewal_of=retired)
    directory.unseal()
    try:
        directory.write_credential(request.name, credential.files)
    finally:
        directory.seal()
    task = minting.manifest.task
    outcome = revoke_credential(broker, session_id, task, replace(old, name=retired), broker.clock(), reason="renewed")
    return Replaced(credential, retired, outcome)
