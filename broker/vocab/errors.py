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
    """Usage, manifest, config or policy file errors; unknown session (exit 2)."""

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


class RuntimeDirError(BadInput):
    """The runtime directory cannot hold secrets safely (not tmpfs, wrong owner...)."""


class StoreError(BadInput):
    """The session store is corrupt, locked or unreadable."""


class OutputError(BrokerError):
    """What the command had to print could not be delivered (exit 1 unless a command says otherwise)."""


class PolicyDenied(BrokerError):
    """The policy denies the request; nothing was minted (exit 3)."""

    exit_code = 3

    def __init__(self, message: str, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = reasons


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


class Interrupted(BrokerError):
    """The broker was asked to stop (SIGINT, SIGTERM, SIGHUP); exit 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by signal {signum}; what was minted has been rolled back")
        self.signum = signum
        self.exit_code = 128 + signum
