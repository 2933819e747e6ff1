"""The lifecycle states of a session and of a credential: one enum each, instead of string literals.

``StrEnum``, so a state is stored, logged and printed as the very string it
always was (``"active"``, ``"valid-until-expiry"``): the store's rows, the
JSON of ``status`` and ``revoke`` and the log records stay the same.
"""

from __future__ import annotations

import enum

from providers.base import RevokeOutcome


class SessionState(enum.StrEnum):
    ISSUING = "issuing"  # recorded before the first mint; sweep revokes it if the broker died
    ACTIVE = "active"
    REVOKING = "revoking"
    REVOKED = "revoked"
    EXPIRED = "expired"
    FAILED = "failed"  # the issue failed and was rolled back
    AWAITING_APPROVAL = "awaiting-approval"  # nothing minted: a person decides first (its approval request)
    DENIED = "denied"  # its approval request was denied; nothing was minted


LIVE_SESSION_STATES = (SessionState.ISSUING, SessionState.ACTIVE, SessionState.REVOKING)
ENDED_SESSION_STATES = (SessionState.REVOKED, SessionState.EXPIRED, SessionState.FAILED, SessionState.DENIED)
#: What ``status`` lists without ``--all``: the live sessions and those still waiting for their approval.
SHOWN_SESSION_STATES = (SessionState.AWAITING_APPROVAL, *LIVE_SESSION_STATES)


class ApprovalState(enum.StrEnum):
    """An approval request: waiting for a person, decided, or over."""

    PENDING = "pending"
    GRANTED = "granted"  # approved; its session is minted when the requester collects it
    DENIED = "denied"
    EXPIRED = "expired"  # not decided (or not collected) in time
    COLLECTED = "collected"  # its session was issued
    WITHDRAWN = "withdrawn"  # revoked before it was issued


#: Approval requests that still await something: a decision, or the collection of an approved session.
OPEN_APPROVAL_STATES = (ApprovalState.PENDING, ApprovalState.GRANTED)


class CredentialState(enum.StrEnum):
    MINTING = "minting"  # recorded before the provider call, with the reference known in advance
    ACTIVE = "active"
    PENDING = "pending"  # a revocation that has not succeeded yet: sweep retries it
    REVOKED = "revoked"
    EXPIRED = "expired"
    VALID_UNTIL_EXPIRY = "valid-until-expiry"
    FAILED = "failed"  # the provider never minted it

    @classmethod
    def after(cls, outcome: RevokeOutcome) -> CredentialState:
        """The state a credential is left in by a provider's revocation outcome."""
        return _AFTER[outcome]


_AFTER = {
    RevokeOutcome.REVOKED: CredentialState.REVOKED,
    RevokeOutcome.PENDING: CredentialState.PENDING,
    RevokeOutcome.EXPIRED: CredentialState.EXPIRED,
    RevokeOutcome.VALID_UNTIL_EXPIRY: CredentialState.VALID_UNTIL_EXPIRY,
}
#: Credential states that may still be valid at the provider.
UNSETTLED_CREDENTIAL_STATES = (CredentialState.MINTING, CredentialState.ACTIVE, CredentialState.PENDING)
#: Credential states a revocation ends in for good.
SETTLED_CREDENTIAL_STATES = (CredentialState.REVOKED, CredentialState.EXPIRED, CredentialState.VALID_UNTIL_EXPIRY)
