"""The exchange itself (RFC 8693): a subject token of the broker's issuer sent to the token endpoint, an access
token back, read strictly.

The request is a form POST: ``grant_type`` token-exchange, the
``subject_token`` (a JWT, ``subject_token_type`` ``...:jwt``), the
``requested_token_type`` (an access token), the ``scope`` asked and, for a
public client, its ``client_id``. The answer must be JSON with an
``access_token`` of printable characters and, when it says, ``token_type``
Bearer (or ``N_A``) and a positive ``expires_in``. An error answer is one
line naming RFC 6749's error code and its description (bounded, with the
subject token scrubbed from it); a refusal for the subject token's time
(issued in the future, expired) names the clock this host and the endpoint
disagree on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret

GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TYPE = "urn:ietf:params:oauth:token-type:jwt"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 (a token type's name)
TOKEN_TEXT = re.compile(r"[\x21-\x7e]{8,8192}", re.ASCII)
TIME_REFUSAL = re.compile(r"\b(?:iat|exp|nbf)\b|expired|in the future|not (?:yet )?valid", re.IGNORECASE)
MAX_DETAIL = 200


@dataclass(frozen=True)
class Endpoint:
    """Where and how to exchange: the endpoint, the CA file trusted for it, the public client's id, the timeout."""

    name: str
    url: str
    ca_file: str | None
    client_id: str | None
    timeout: int


@dataclass(frozen=True)
class Exchanged:
    token: Secret
    expires_in: int | None
    issued_token_type: str


def exchange(endpoint: Endpoint, subject: Secret, scopes: tuple[str, ...]) -> Exchanged:
    """The access token ``endpoint`` gives for ``subject``; ``ProviderError`` naming why not."""
    import requests

    form = {
        "grant_type": GRANT_TYPE,
        "subject_token": subject.reveal(),
        "subject_token_type": JWT_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
    }
    if scopes:
        form["scope"] = " ".join(scopes)
    if endpoint.client_id is not None:
        form["client_id"] = endpoint.client_id
    prefix = f"token_exchange {endpoint.name}: exchange at {endpoint.url}"
    try:
        answer = requests.post(endpoint.url, data=form, timeout=endpoint.timeout, verify=endpoint.ca_file or True)
        document = answer.json()
    except requests.RequestException as exc:
        raise ProviderError(f"{prefix} failed: cannot reach it ({type(exc).__name__})") from None
    except ValueError:
        raise ProviderError(f"{prefix} failed: HTTP {answer.status_code}, not JSON") from None
    if not isinstance(document, dict):
        raise ProviderError(f"{prefix} failed: HTTP {answer.status_code}, not a JSON object")
    if answer.status_code != 200:
        raise _refusal(prefix, answer.status_code, document, subject)
    return _read(prefix, document)


def _refusal(prefix: str, status: int, document: dict[str, Any], subject: Secret) -> ProviderError:
    code = str(document.get("error") or f"HTTP {status}")[:64]
    said = " ".join(str(document.get("error_description") or "").replace(subject.reveal(), "***").split())
    said = said if len(said) <= MAX_DETAIL else said[:MAX_DETAIL] + "..."
    if code == "invalid_grant" and TIME_REFUSAL.search(said):
        return ProviderError(
            f"{prefix} refused the broker's token for its time ({said}): this host's clock and the endpoint's"
            " disagree; synchronise this host's clock (chrony, systemd-timesyncd)",
            retryable=False,
        )
    retryable = status >= 500 or code in ("temporarily_unavailable", "server_error")
    return ProviderError(f"{prefix} refused: {code}" + (f": {said}" if said else ""), retryable=retryable)


def _read(prefix: str, document: dict[str, Any]) -> Exchanged:
    token = document.get("access_token")
    if not isinstance(token, str) or not TOKEN_TEXT.fullmatch(token):
        raise ProviderError(f"{prefix} answered without a usable access_token", retryable=False)
    kind = str(document.get("token_type") or "Bearer")
    if kind.lower() not in ("bearer", "n_a"):
        raise ProviderError(f"{prefix} answered with a {kind[:32]!r} token, not a bearer token", retryable=False)
    expires_in = document.get("expires_in")
    if expires_in is not None and (isinstance(expires_in, bool) or not isinstance(expires_in, int) or expires_in < 1):
        raise ProviderError(f"{prefix} answered with an expires_in that is not a positive number", retryable=False)
    issued = str(document.get("issued_token_type") or ACCESS_TOKEN_TYPE)
    return Exchanged(Secret(token), expires_in, issued)
