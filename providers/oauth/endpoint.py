"""The authorisation server as the broker calls it: its token endpoint (RFC 6749), revocation (RFC 7009) and
introspection (RFC 7662) endpoints, over verified TLS.

The client authenticates with ``client_secret_basic`` when the instance has a
``client_secret_file`` (its id and secret form-encoded, then Basic, as RFC
6749 section 2.3.1 says), else as a public client naming its ``client_id``.
Every answer is read bounded, no redirect is followed (a credential never
goes to a server the operator did not name), and an error answer comes back
as ``Refused`` with the server's ``error`` code and a description cleared of
anything the broker sent in the request. ``requests`` is imported on first use.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from broker.vocab.errors import ProviderError
from broker.vocab.secret import Secret, read_secret_file
from providers.oauth.settings import OAuthSettings
from providers.warm import open_connections, requests_pool

if TYPE_CHECKING:
    import requests

MAX_ANSWER = 64 * 1024
#: An access or refresh token as the broker takes it: printable ASCII, no spaces, one line.
TOKEN = re.compile(r"[\x21-\x7e]{1,8192}")
ERROR_CODE = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]{1,64}")  # RFC 6749 section 5.2's error charset
Form = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] | None
    date: str | None = None


@dataclass(frozen=True)
class TokenAnswer:
    """A token endpoint's success (RFC 6749 section 5.1), its values checked for shape only."""

    access_token: Secret
    token_type: str
    expires_in: int | None
    scope: tuple[str, ...] | None  # None: the server did not say (the scope asked for)
    refresh_token: Secret | None


class Refused(Exception):
    """The server answered with an error (RFC 6749 section 5.2): its status, ``error`` code and description."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(error)
        self.status = status
        self.error = error
        self.description = description

    def said(self) -> str:
        """``error: description`` as a message may quote it."""
        return f"{self.error}: {self.description}" if self.description else self.error


class Endpoints:
    """One instance's calls to its authorisation server, on one kept-alive session."""

    def __init__(self, name: str, settings: OAuthSettings) -> None:
        self.name = name
        self.settings = settings
        self._session: requests.Session | None = None
        self._lock = threading.Lock()

    def session(self) -> requests.Session:
        import requests

        with self._lock:
            if self._session is None:
                session = requests.Session()
                session.verify = str(self.settings.ca_file) if self.settings.ca_file is not None else True
                session.trust_env = False  # the operator's server, reached directly: no proxy, no netrc
                self._session = session
            return self._session

    def warm_up(self) -> None:
        """A kept-alive connection to the token endpoint (sends nothing)."""
        open_connections(requests_pool(self.session(), self.settings.token_url), 1)

    def client_secret(self) -> Secret | None:
        file = self.settings.client_secret_file
        return None if file is None else read_secret_file(file, f"providers.{self.name}.client_secret_file")

    def _authenticated(self, form: Form) -> tuple[list[tuple[str, str]], dict[str, str], list[Secret]]:
        """The form with the client named, the headers authenticating it, and the secrets it holds."""
        secret = self.client_secret()
        fields = list(form)
        if secret is None:
            return [*fields, ("client_id", self.settings.client_id)], {}, []
        pair = f"{quote_plus(self.settings.client_id)}:{quote_plus(secret.reveal())}"
        basic = base64.b64encode(pair.encode()).decode("ascii")
        return fields, {"Authorization": f"Basic {basic}"}, [secret]

    def post(self, url: str, form: Form, what: str, sent: Sequence[Secret] = ()) -> Answer:
        """POST ``form`` (the client authenticated) to ``url``; a ``ProviderError`` when it cannot be reached."""
        import requests

        fields, headers, secrets = self._authenticated(form)
        try:
            response = self.session().post(
                url,
                data=fields,
                headers={**headers, "Accept": "application/json"},
                timeout=self.settings.timeout,
                allow_redirects=False,
                stream=True,
            )
            try:
                raw = response.raw.read(MAX_ANSWER + 1, decode_content=True)
            finally:
                response.close()
        except requests.exceptions.SSLError:
            raise ProviderError(
                f"oauth {self.name}: TLS with {self.settings.host} failed for its {what}: its certificate is not"
                " trusted (ca_file) or does not name it",
                retryable=False,
            ) from None
        except requests.exceptions.RequestException as exc:
            raise ProviderError(
                f"oauth {self.name}: the {what} {url} cannot be reached ({type(exc).__name__})"
            ) from None
        if len(raw) > MAX_ANSWER:
            raise ProviderError(f"oauth {self.name}: the {what} answered more than {MAX_ANSWER} bytes")
        body = _json(raw)
        if not 200 <= response.status_code < 300:  # an error, or a redirect the broker does not follow
            raise _refused(response.status_code, body, [*secrets, *sent])
        return Answer(response.status_code, body, response.headers.get("Date"))

    def token(self, form: Form, sent: Sequence[Secret] = ()) -> TokenAnswer:
        """A token request; ``Refused`` with the server's error, ``ProviderError`` for an answer of no use."""
        answer = self.post(self.settings.token_url, form, "token endpoint", sent)
        body = answer.body
        if answer.status != 200 or body is None:
            raise ProviderError(f"oauth {self.name}: the token endpoint answered HTTP {answer.status} without a token")
        access = body.get("access_token")
        if not isinstance(access, str) or not TOKEN.fullmatch(access):
            raise ProviderError(f"oauth {self.name}: the token endpoint answered without a usable access_token")
        refresh = body.get("refresh_token")
        if refresh is not None and (not isinstance(refresh, str) or not TOKEN.fullmatch(refresh)):
            raise ProviderError(f"oauth {self.name}: the token endpoint answered an unusable refresh_token")
        expires = body.get("expires_in")
        if isinstance(expires, str) and expires.isdigit():
            expires = int(expires)
        scope = body.get("scope")
        return TokenAnswer(
            access_token=Secret(access),
            token_type=str(body.get("token_type") or "")[:32],
            expires_in=expires if isinstance(expires, int) and not isinstance(expires, bool) else None,
            scope=tuple(scope.split()) if isinstance(scope, str) else None,
            refresh_token=Secret(refresh) if isinstance(refresh, str) else None,
        )

    def revoke(self, token: Secret, hint: str) -> None:
        """RFC 7009: the server ends ``token`` (an unknown one too: it answers 200 either way)."""
        assert self.settings.revocation_url is not None
        self.post(
            self.settings.revocation_url,
            [("token", token.reveal()), ("token_type_hint", hint)],
            "revocation endpoint",
            [token],
        )

    def introspect(self, token: Secret, hint: str) -> dict[str, Any]:
        """RFC 7662: what the server says of ``token`` (``active`` at least)."""
        assert self.settings.introspection_url is not None
        answer = self.post(
            self.settings.introspection_url,
            [("token", token.reveal()), ("token_type_hint", hint)],
            "introspection endpoint",
            [token],
        )
        if answer.body is None or not isinstance(answer.body.get("active"), bool):
            raise ProviderError(f"oauth {self.name}: the introspection endpoint answered without 'active'")
        return answer.body

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None


def _json(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _refused(status: int, body: dict[str, Any] | None, sent: Sequence[Secret]) -> Refused:
    body = body or {}
    error = body.get("error")
    code = error if isinstance(error, str) and ERROR_CODE.fullmatch(error) else f"HTTP {status}"
    text = body.get("error_description")
    description = ""
    if isinstance(text, str):
        cleaned = "".join(c for c in text if " " <= c <= "~")[:160]
        # a description echoing what was sent (a token, the client's secret) is left out whole
        if not any(secret.reveal() in text for secret in sent if len(secret)):
            description = cleaned
    return Refused(status, code, description)
