"""Turning botocore's exceptions into broker errors, at the ``aws_sts`` provider's boundary.

Messages are built from the error code and AWS's message only (never from
request parameters or credentials), scrubbed of any secret the caller names,
and cut to one bounded line. ``ParamValidationError`` (a value botocore refuses
before sending) is bad input; everything else is a ``ProviderError``, not
retryable when the request itself was wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.vocab.errors import BrokerError, ManifestError, ProviderError

if TYPE_CHECKING:
    from broker.vocab.secret import Secret

#: AWS error codes that a retry cannot fix.
PERMANENT_CODES = frozenset(
    {
        "ValidationError",
        "MalformedPolicyDocument",
        "MalformedPolicyDocumentException",
        "PackedPolicyTooLarge",
        "PackedPolicyTooLargeException",
        "UnmodifiableEntity",
        "RegionDisabledException",
        "InvalidParameterValue",
    }
)
MAX_DETAIL = 300


class ProviderFacts(Protocol):
    """What error messages need of the provider instance."""

    @property
    def name(self) -> str: ...

    @property
    def endpoint_url(self) -> str | None: ...


class AwsErrors:
    """Context manager around one AWS call; ``missing_ok`` swallows ``NoSuchEntity`` into ``.missing``."""

    def __init__(
        self,
        provider: ProviderFacts,
        action: str,
        *,
        missing_ok: bool = False,
        secrets: tuple[Secret, ...] = (),
    ) -> None:
        self.provider = provider
        self.action = action
        self.missing_ok = missing_ok
        self.secrets = secrets
        self.missing = False

    def __enter__(self) -> AwsErrors:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> bool:
        if exc is None or isinstance(exc, BrokerError):
            return False
        from botocore import exceptions as bx

        prefix = f"aws {self.provider.name}: {self.action} failed"
        if isinstance(exc, bx.ClientError):
            error = exc.response.get("Error") or {}
            code = str(error.get("Code") or "Unknown")
            if self.missing_ok and code == "NoSuchEntity":
                self.missing = True
                return True
            detail = self._scrub(str(error.get("Message") or ""))
            error_out = ProviderError(
                f"{prefix}: {code}: {detail}" if detail else f"{prefix}: {code}",
                retryable=code not in PERMANENT_CODES,
            )
            # The raw error stays out of the chain when it may echo a secret (tracebacks under --debug).
            raise error_out from (None if self.secrets else exc)
        if isinstance(exc, bx.ParamValidationError):
            raise ManifestError(f"{prefix}: {self._scrub(str(exc))}") from (None if self.secrets else exc)
        if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError | bx.ProfileNotFound):
            raise ProviderError(
                f"{prefix}: the broker's own AWS identity is not usable ({type(exc).__name__})",
                retryable=False,
            ) from exc
        if isinstance(exc, bx.EndpointConnectionError | bx.ConnectionError | bx.HTTPClientError):
            where = self.provider.endpoint_url or "AWS"
            raise ProviderError(f"{prefix}: cannot reach {where} ({type(exc).__name__})") from exc
        if isinstance(exc, bx.BotoCoreError):
            raise ProviderError(f"{prefix}: {type(exc).__name__}") from exc
        return False

    def _scrub(self, text: str) -> str:
        for secret in self.secrets:
            value = secret.reveal()
            if value:
                text = text.replace(value, "***")
        text = " ".join(text.split())
        return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL] + "..."
