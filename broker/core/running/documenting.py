"""The session document kept true after a renewal: its credentials' ends, in ``session.json`` and in the store.

The session document lists when each credential ends (``expires_at``).
``renew`` (a file credential's new secret) and a running session's
``Rotator`` (a proxied credential's, behind its unchanged placeholder) both
change that, so after each renewal the document is written again: into the
session directory through ``SessionDirectory.write_file`` (the broker's one
writer of private files: a new file renamed over the old, never half of
either) and into the store, where ``renew`` and ``status`` read it back.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.core.broker import Broker
from broker.core.session_document import SessionDocument
from broker.core.store.interface import SessionRecord
from broker.core.store.lineage import ancestors
from broker.host.sessiondir import SessionDirectory


def refresh_document(broker: Broker, session: SessionRecord, expiry: Mapping[str, str]) -> None:
    """Rewrite ``session``'s document with the new ends ``expiry`` (credential name to ISO time)."""
    if session.document is None or not expiry:
        return
    document = SessionDocument.from_json(session.document).renewed(expiry)
    lineage = ancestors(broker.store, session)
    directory = SessionDirectory(broker.runtime, session.id, session.uid, session.gid, lineage)
    directory.unseal()
    try:
        directory.write_file("session.json", document.file_content())
    finally:
        directory.seal()
    broker.store.set_session_document(session.id, document.to_json())
