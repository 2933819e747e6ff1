"""HTTP to the GitHub REST API for the ``github_app`` provider.

Owns one ``requests.Session`` per provider with the headers GitHub wants
(``Accept``, ``X-GitHub-Api-Version: 2022-11-28``, ``User-Agent``), the App
JWT (RS256, ``iat`` 60 s back, ``exp`` 540 s ahead, cached while it has a
minute left), retries with backoff on 5xx and network errors, bounded waits on
secondary rate limits (403/429 with ``Retry-After``), and one-line error texts
that never hold the JWT, an installation token or the private key.
``requests``, ``jwt`` and ``cryptography`` are imported on first use.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from broker import __version__
from broker.vocab.errors import ConfigError, ProviderError
from broker.vocab.secret import Secret, read_secret_file
from providers.warm import open_connections, requests_pool

if TYPE_CHECKING:
    import requests
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey

API_VERSION = "2022-11-28"
USER_AGENT = f"scoped-credential-broker/{__version__}"
JWT_BACKDATE = 60
JWT_LIFETIME = 540
JWT_MIN_LEFT = 60
MIN_RSA_BITS = 2048
# Anything that looks like a GitHub token or a JWT is cut out of quoted messages.
_SECRETISH = re.compile(
    r"(gh[pousr]_|github_pat_)[A-Za-z0-9_.\-]+|eyJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]*)?"
)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # tries per call on 5xx and network errors
    backoff: float = 0.5  # seconds before the first retry, doubled after each
    max_wait: float = 10.0  # total seconds one call may spend waiting (backoff and Retry-After)


@dataclass(frozen=True)
class ApiResponse:
    status: int
    body: Any  # parsed JSON, or None
    retry_after: float | None = None

    def message(self) -> str:
        """GitHub's ``message``, one line, bounded, with anything token-like cut out."""
        text = self.body.get("message") if isinstance(self.body, dict) else None
        if not isinstance(text, str) or not text.strip():
            return f"HTTP {self.status}"
        text = _SECRETISH.sub("[redacted]", " ".join(text.split()))
        return f"HTTP {self.status}: {text[:200]}"


class GitHubApi:
    """The broker's own session with one GitHub API (github.com, GHES, the emulator)."""

    def __init__(
        self,
        *,
        label: str,
        api_url: str,
        app_id: str,
        key_file: Path,
        key_what: str,
        timeout: int,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.label = label
        self.api_url = api_url
        self.app_id = app_id
        self.key_file = key_file
        self.key_what = key_what
        self.timeout = timeout
        self.clock = clock
        self.sleep = sleep
        self.retry = RetryPolicy()
        self._host = urlsplit(api_url).netloc
        self._lock = threading.Lock()
        self._session: requests.Session | None = None
        self._key: RSAPrivateKey | None = None
        self._jwt: tuple[Secret, float] | None = None

    # -- the App's identity --------------------------------------------------------------

    def signing_key(self) -> RSAPrivateKey:
        """The App's private key, read and checked on first use (ConfigError when unfit)."""
        with self._lock:
            if self._key is None:
                self._key = self._load_key()
            return self._key

    def _load_key(self) -> RSAPrivateKey:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        pem = read_secret_file(self.key_file, self.key_what)
        where = f"{self.key_what} {self.key_file}"
        try:
            # The operator's own key, read from a 0600 file: its RSA consistency check (45 ms) buys nothing;
            # a broken key only makes signatures GitHub refuses.
            key = load_pem_private_key(pem.reveal_bytes(), password=None, unsafe_skip_rsa_key_validation=True)
        except TypeError:
            raise ConfigError(f"{where} is encrypted; the broker needs the unencrypted PEM key") from None
        except (ValueError, UnsupportedAlgorithm):
            raise ConfigError(f"{where} is not a PEM private key") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            kind = type(key).__name__.removeprefix("_").replace("PrivateKey", "") or "non-RSA"
            raise ConfigError(f"{where} is an {kind} key; GitHub App keys are RSA")
        if key.key_size < MIN_RSA_BITS:
            raise ConfigError(f"{where} is a {key.key_size}-bit RSA key; GitHub App keys have 2048 bits")
        return key

    def app_jwt(self) -> Secret:
        """A JWT authenticating as the App; reused while it is valid for another minute."""
        now = self.clock()
        with self._lock:
            if self._jwt is not None and self._jwt[1] - now >= JWT_MIN_LEFT:
                return self._jwt[0]
        import jwt

        key = self.signing_key()
        issued = int(now)
        claims = {"iat": issued - JWT_BACKDATE, "exp": issued + JWT_LIFETIME, "iss": self.app_id}
        token = Secret(jwt.encode(claims, key, algorithm="RS256"))
        with self._lock:
            self._jwt = (token, float(issued + JWT_LIFETIME))
        return token

    def forget_jwt(self) -> None:
        with self._lock:
            self._jwt = None

    # -- calls ---------------------------------------------------------------------------

    def session(self) -> requests.Session:
        with self._lock:
            if self._session is None:
                self._session = self._new_session()
            return self._session

    def _new_session(self) -> requests.Session:
        import requests

        session = requests.Session()
        session.headers.update(
            {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": API_VERSION, "User-Agent": USER_AGENT}
        )
        return session

    def warm_up(self, sign: bool) -> None:
        """The App JWT signed (when ``sign``), and the session with a kept-alive connection to the API (published
        once connected)."""
        if sign:
            self.app_jwt()
        with self._lock:
            if self._session is None:
                session = self._new_session()
                open_connections(requests_pool(session, self.api_url), 1)
                self._session = session

    def call(
        self, method: str, path: str, *, what: str, token: Secret | None = None, body: object = None
    ) -> ApiResponse:
        """One API call, authenticated with ``token`` or else the App JWT.

        Retries network errors and 5xx with backoff, waits out short secondary
        rate limits, and returns the final answer whatever its status; only a
        network failure that outlasts the retries raises ``ProviderError``.
        """
        import requests

        budget = _Budget(self.retry, self.sleep)
        while True:
            credential = token if token is not None else self.app_jwt()
            try:
                response = self._send(method, path, credential, body)
            except requests.exceptions.RequestException as exc:
                if budget.backoff():
                    continue
                raise ProviderError(
                    f"github {self.label}: {what} failed: cannot reach {self._host} ({type(exc).__name__})"
                ) from None
            if response.status >= 500 and budget.backoff():
                continue
            limited = response.status in (403, 429) and response.retry_after is not None
            if limited and budget.wait(response.retry_after or 0.0):
                continue
            if response.status == 401 and token is None:
                self.forget_jwt()
            return response

    def _send(self, method: str, path: str, credential: Secret, body: object) -> ApiResponse:
        headers = {"Authorization": f"Bearer {credential.reveal()}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        data = None if body is None else json.dumps(body).encode("utf-8")
        raw = self.session().request(
            method,
            self.api_url + path,
            headers=headers,
            data=data,
            timeout=self.timeout,
            allow_redirects=False,
        )
        try:
            parsed = raw.json() if raw.content else None
        except ValueError:
            parsed = None
        return ApiResponse(raw.status_code, parsed, _retry_after(raw.headers))

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
                self._session = None


class _Budget:
    """How many more tries and how many more seconds of waiting one call has left."""

    def __init__(self, policy: RetryPolicy, sleep: Callable[[float], None]) -> None:
        self.tries_left = policy.attempts - 1
        self.seconds_left = policy.max_wait
        self.delay = policy.backoff
        self.sleep = sleep

    def backoff(self) -> bool:
        if self.wait(self.delay):
            self.delay *= 2
            return True
        return False

    def wait(self, seconds: float) -> bool:
        seconds = max(seconds, 0.0)
        if self.tries_left <= 0 or seconds > self.seconds_left:
            return False
        self.tries_left -= 1
        self.seconds_left -= seconds
        self.sleep(seconds)
        return True


def _retry_after(headers: Any) -> float | None:
    """Seconds GitHub asks us to wait (``Retry-After``, or a used-up rate limit's reset)."""
    value = headers.get("Retry-After")
    if value is not None:
        try:
            return float(int(value))
        except ValueError:
            return None
    if headers.get("X-RateLimit-Remaining") == "0" and headers.get("X-RateLimit-Reset"):
        try:
            return max(float(int(headers["X-RateLimit-Reset"])) - time.time(), 0.0)
        except ValueError:
            return None
    return None
