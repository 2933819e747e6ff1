"""The broker's one exception hierarchy; each class carries the exit code of SPEC.md.

The CLI catches ``BrokerError`` once and prints ``broker: error: <message>``.
Messages are single lines and never contain secret material.
"""

from __future__ import annotations

REPORT_URL = "https://github.com/scoped-credential-broker/broker/issues"


class BrokerError(Exception):
    """Base of every error the broker reports to its user."""

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        one_line = " ".join(str(message).split())
        super().__init__(one_line)
        self.message = one_line


class InternalError(BrokerError):
    """A bug: something the broker did not expect (exit 1)."""

    exit_code = 1


class BadInput(BrokerError):
    """What the caller or the operator gave is wrong: usage, manifest, config or policy file; unknown session
    (exit 2)."""

    exit_code = 2


class UsageError(BadInput):
    """The command line itself is wrong."""


class ConfigError(BadInput):
    """The operator configuration is missing or malformed."""


class ManifestError(BadInput):
    """The task manifest (untrusted input) is invalid."""


class PolicyFileError(BadInput):
    """A policy file is missing, malformed or refers to unknown providers."""


class UnknownSession(BadInput):
    """No session with that id (or no live session for that task)."""


class UnknownRequest(BadInput):
    """No approval request with that id, or none that can take this decision any more."""


class StateError(BrokerError):
    """The broker's own state cannot be used: its session store, or a directory it keeps state or secrets in.

    Not something the caller gave (that is ``BadInput``) nor a provider's
    failure: the host needs its operator (a directory to fix, a database to
    bring back) or a moment (a lock another broker holds). Exit 2, where
    SPEC's table puts "runtime directory not on tmpfs".
    """

    exit_code = 2


class RuntimeDirError(StateError):
    """The runtime directory cannot hold secrets safely (not tmpfs, wrong owner...)."""


class StoreError(StateError):
    """The session store (or the state directory holding it) is corrupt, locked, unreadable or unreachable."""


class NoRoom(StateError):
    """The file system of ``state_dir`` (the issuance log's) has less free room than ``[audit] min_free``: no new
    session is issued (exit 2); revoke and sweep still are."""


class OutputError(BrokerError):
    """What the command had to print could not be delivered (exit 1 unless a command says otherwise)."""


class PolicyDenied(BrokerError):
    """The policy denies the request; nothing was minted (exit 3)."""

    exit_code = 3

    def __init__(self, message: str, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons


class RateLimited(PolicyDenied):
    """Asked more often, or more in all, than the policy allows; nothing was done (exit 3; HTTP 429 on a socket).

    ``limit`` names the limit: ``rate`` (a minute's) or ``total`` (a life's)."""

    def __init__(self, message: str, limit: str) -> None:
        super().__init__(message, (f"{limit}: {message}",))
        self.limit = limit


class ProviderError(BrokerError):
    """A provider failed (unreachable, refused, unexpected answer) (exit 4)."""

    exit_code = 4

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class IssueRolledBack(BrokerError):
    """``issue`` failed after minting; what was minted was revoked again, or is named as pending (exit 4)."""

    exit_code = 4


class RevokeIncomplete(BrokerError):
    """Some credentials could not be revoked now and stay pending (exit 5)."""

    exit_code = 5


class LogVerificationError(BrokerError):
    """The issuance log failed verification (exit 6)."""

    exit_code = 6


class DaemonUnreachable(BrokerError):
    """The daemon named by ``[daemon] socket`` or ``BROKER_SOCKET`` cannot be reached (exit 7; never a fallback)."""

    exit_code = 7


class AwaitingApproval(BrokerError):
    """The session waits for a person's approval: nothing is minted yet (exit 8).

    ``request`` is what ``broker approve`` and ``broker issue --resume`` take;
    ``digest`` is what the approver must give back, so that an approval binds
    to exactly the request it was shown.
    """

    exit_code = 8

    def __init__(self, message: str, request: str, digest: str) -> None:
        super().__init__(message)
        self.request = request
        self.digest = digest


class DaemonReported(BrokerError):
    """An error the daemon answered with: its one-line message and the exit code the direct command has for it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class Interrupted(BrokerError):
    """The broker was asked to stop (SIGINT, SIGTERM, SIGHUP); exit 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}; what was minted has been rolled back")
        self.signum = signum
        self.exit_code = 128 + signum
