"""GitHub App installation tokens: one token per credential, for named repositories of one owner.

The broker signs an App JWT with the App's private key, finds the owner's
installation (by repository, then organisation, then user; cached per
owner), and mints with an explicit repository list and explicit permissions,
never an empty list, never without permissions, since either would widen the
token to everything the installation has. The answer is compared with the
request (GitHub adds ``metadata: read`` to every token on its own; anything
else extra fails the mint, and the core revokes the token at once). Tokens live
one hour at GitHub and cannot be shortened; the credential's ``expires_at``
is capped at the session's, and the core revokes then. Revocation is
``DELETE /installation/token`` with the token itself, which the core keeps on
tmpfs only; a token whose kept copy a reboot lost stays pending until
GitHub's hour is over (its end is recorded at minting), then settles as
expired. ``requests`` and ``jwt`` are imported on first use.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from broker.vocab.checks import Check
from broker.vocab.errors import BrokerError, ProviderError
from broker.vocab.fields import Fields, describe, shown
from broker.vocab.secret import Secret
from broker.vocab.time import iso
from providers.base import (
    MintContext,
    MintedCredential,
    MintRejected,
    Provider,
    ProxyFacts,
    RevokeOutcome,
    RevokeTarget,
)
from providers.clock import aware, clock_check, parse_time
from providers.github.git import check_api_url, git_host, gitconfig
from providers.github.http import ApiResponse, GitHubApi
from providers.github.narrowing import github_narrower
from providers.github.permissions import IMPLICIT_PERMISSION
from providers.github.request import GitHubGrant, GitHubRequest, compile_grant, parse_request
from providers.placeholders import token_placeholders, token_secret
from providers.warm import Sdk

__all__ = ["GitHubAppProvider", "GitHubGrant", "GitHubRequest"]

APP_ID = re.compile(r"[1-9][0-9]{0,19}")
TOKEN = re.compile(r"[\x21-\x7e]{8,8192}")  # opaque, any length, but printable and one line


class GitHubAppProvider(Provider[GitHubRequest]):
    """Capabilities: ``Warming``, ``Narrowing``, ``Placeholding`` (its token's placeholder in its files). It cannot
    search for tokens (``FindsMinted``): they die within the hour."""

    type_name = "github_app"
    narrower = staticmethod(github_narrower)
    placeholders = staticmethod(token_placeholders)
    proxy_secret = staticmethod(token_secret)
    max_ttl = 3600  # GitHub's installation tokens live one hour
    fixed_lifetime = 3600  # and cannot be shortened: revoking is the only way to end one early
    revokes_with_kept_secret = True  # DELETE /installation/token with the token: only its keep-safe's host can
    proxy = ProxyFacts(label="GitHub", documented_as="github_app")
    reserved_env = frozenset({"GIT_CONFIG_GLOBAL"})
    warm_first = False
    # A token revokes itself: a revocation needs no App JWT.
    sdk = Sdk(("requests", "jwt", "cryptography.hazmat.primitives.serialization"), revoking=("requests",))

    def __init__(
        self,
        name: str,
        *,
        app_id: str,
        private_key_file: Path,
        api_url: str,
        timeout: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(name)
        self.app_id = app_id
        self.api_url = api_url
        self.clock = clock
        self.api = GitHubApi(
            label=name,
            api_url=api_url,
            app_id=app_id,
            key_file=private_key_file,
            key_what=f"providers.{name}.private_key_file",
            timeout=timeout,
            clock=clock,
        )
        self._installations: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- configuration -------------------------------------------------------------------

    @classmethod
    def from_config(cls, name: str, fields: Fields, config_dir: Path) -> GitHubAppProvider:
        raw_id = fields.raw("app_id")
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            raw_id = str(raw_id)
        if not isinstance(raw_id, str) or not APP_ID.fullmatch(raw_id):
            got = "missing" if raw_id is None else f"got {describe(raw_id)}"
            raise fields.fail("app_id", f"expected the App's numeric id ({got})")
        key_file = fields.req_string("private_key_file", max_len=4096)
        api_url = fields.string("api_url", required=False, max_len=512) or "https://api.github.com"
        problem = check_api_url(api_url)
        if problem is not None:
            raise fields.fail("api_url", f"{shown(api_url)} {problem}")
        return cls(
            name,
            app_id=raw_id,
            private_key_file=config_dir / key_file,
            api_url=api_url.rstrip("/"),
            timeout=fields.integer("timeout", minimum=1, maximum=300) or 10,
        )

    @classmethod
    def parse_request(cls, fields: Fields, *, name: str, provider: str, ttl: int | None) -> GitHubRequest:
        return parse_request(fields, name=name, provider=provider, ttl=ttl)

    @classmethod
    def compile_grant(cls, fields: Fields, *, provider: str, max_ttl: int | None) -> GitHubGrant:
        return compile_grant(fields, provider=provider, max_ttl=max_ttl)

    # -- provider calls ------------------------------------------------------------------

    def mint(self, request: GitHubRequest, context: MintContext) -> MintedCredential:
        names, permissions = request.names(), request.permission_map()
        if not names or not permissions:  # either would widen the token to the whole installation
            raise ProviderError(f"github {self.name}: refusing a token without repositories or permissions")
        try:  # before minting, so a path git cannot take never leaves a live token behind
            config = gitconfig(git_host(self.api_url), context.mount_dir / "token")
        except ValueError as exc:
            raise ProviderError(f"github {self.name}: {exc}", retryable=False) from None
        installation = self.installation_id(request.owner, names[0])
        response = self.api.call(
            "POST",
            f"/app/installations/{installation}/access_tokens",
            what="token create",
            body={"repositories": names, "permissions": permissions},
        )
        if response.status == 404:
            with self._lock:
                self._installations.pop(request.owner.lower(), None)
        if response.status != 201:
            raise self._failure(response, f"token create for {request.owner}")
        token, github_expiry = self._read_token(response)
        now = datetime.fromtimestamp(self.clock(), UTC)
        latest = now + timedelta(seconds=self.fixed_lifetime)
        token_end = github_expiry or latest
        expires_at = min(token_end, aware(context.session_expires_at), now + timedelta(seconds=context.ttl))
        minted = MintedCredential(
            reference={
                "installation_id": installation,
                "owner": request.owner,
                # GitHub's own end of the token (whole seconds, rounded up): a token whose kept copy
                # is lost is live until then, whatever the session's end.
                "token_expires_at": iso(token_end + timedelta(microseconds=999_999)),
            },
            secret=token,
            files={"token": token, "gitconfig": config},
            expires_at=expires_at,
            scope=request.scope(),
            env={"GIT_CONFIG_GLOBAL": str(context.mount_dir / "gitconfig")},
            revoke_secret=token,
        )
        problem = (
            self._granted_problem(request, response) if github_expiry else "its expires_at is missing or unreadable"
        )
        if problem:  # the core revokes it (one path for every provider), never handed out
            raise MintRejected(f"github {self.name}: GitHub returned a token but {problem}", minted)
        return minted

    def preload(self, minting: bool) -> None:
        self.sdk.load(minting)

    def warm_up(self, minting: bool) -> None:
        self.preload(minting)
        self.api.warm_up(sign=minting)  # a revocation authenticates with the token itself

    def installation_id(self, owner: str, repo: str) -> str:
        """The App's installation on ``owner`` (cached per owner for this object's lifetime)."""
        key = owner.lower()
        with self._lock:
            if key in self._installations:
                return self._installations[key]
        o, r = quote(owner, safe=""), quote(repo, safe="")
        for path in (f"/repos/{o}/{r}/installation", f"/orgs/{o}/installation", f"/users/{o}/installation"):
            response = self.api.call("GET", path, what="installation lookup")
            if response.status in (301, 404):
                continue
            if response.status != 200:
                raise self._failure(response, f"installation lookup for {owner}")
            body = response.body if isinstance(response.body, dict) else {}
            account = body.get("account") if isinstance(body.get("account"), dict) else {}
            ident = body.get("id")
            if not isinstance(ident, int) or isinstance(ident, bool) or ident <= 0:
                raise ProviderError(f"github {self.name}: installation lookup for {owner} returned no id")
            login = account.get("login") if account else None
            if not isinstance(login, str) or login.lower() != key:
                raise ProviderError(
                    f"github {self.name}: installation lookup for {owner} answered with another account"
                )
            with self._lock:
                self._installations[key] = str(ident)
            return str(ident)
        raise ProviderError(
            f"github {self.name}: the GitHub App is not installed for {owner!r} (no installation"
            f" on {owner}/{repo}, organisation or user {owner})",
            retryable=False,
        )

    def health(self) -> list[Check]:
        """The App JWT is accepted (``GET /app``), its installations, the clock; mints nothing."""
        import requests

        fix = f"check app_id, private_key_file and api_url in [providers.{self.name}]"
        try:
            jwt = self.api.app_jwt()
            raw = self.api.session().get(
                self.api_url + "/app",
                headers={"Authorization": f"Bearer {jwt.reveal()}"},
                timeout=self.api.timeout,
                allow_redirects=False,
            )
        except BrokerError as exc:
            return [Check("app", False, exc.message, fix)]
        except requests.exceptions.RequestException as exc:
            host = self.api_url.split("://", 1)[-1].split("/", 1)[0]
            return [
                Check("app", False, f"github {self.name}: GET /app failed: cannot reach {host} ({type(exc).__name__})")
            ]
        received = self.clock()
        try:
            body = raw.json() if raw.content else None
        except ValueError:
            body = None
        clock = clock_check(raw.headers.get("Date"), received, f"github {self.api_url}")
        tail = [clock] if clock else []
        app = ApiResponse(raw.status_code, body)
        if raw.status_code != 200 or not isinstance(body, dict):
            hint = " (check app_id, the private key and this host's clock)" if raw.status_code == 401 else ""
            return [Check("app", False, f"github {self.name}: GET /app answered {app.message()}{hint}", fix), *tail]
        if str(body.get("id")) != self.app_id:
            named = str(body.get("id"))[:40]
            return [Check("app", False, f"github {self.name}: GET /app names App {named}, not {self.app_id}", fix)]
        slug = str(body.get("slug") or "?")[:100]
        return [
            Check("app", True, f"App {self.app_id} ({slug}) accepts the broker's JWT"),
            self._installations_check(),
            *tail,
        ]

    def _installations_check(self) -> Check:
        """Counts the App's installations (``GET /app/installations``, up to ten pages of 100)."""
        accounts: list[str] = []
        for page in range(1, 11):
            try:
                response = self.api.call(
                    "GET", f"/app/installations?per_page=100&page={page}", what="installation list"
                )
            except ProviderError as exc:
                return Check("installations", False, exc.message)
            if response.status != 200 or not isinstance(response.body, list):
                return Check("installations", False, self._failure(response, "installation list").message)
            for item in response.body:
                account = item.get("account") if isinstance(item, dict) else None
                login = account.get("login") if isinstance(account, dict) else None
                accounts.append(str(login)[:40] if login else "?")
            if len(response.body) < 100:
                break
        if not accounts:
            return Check(
                "installations", False, "the App has no installations", "install it on an organisation or user"
            )
        listed = ", ".join(accounts[:5]) + (", ..." if len(accounts) > 5 else "")
        return Check("installations", True, f"{len(accounts)} installation(s): {listed}")

    def _read_token(self, response: ApiResponse) -> tuple[Secret, datetime | None]:
        body = response.body if isinstance(response.body, dict) else {}
        raw = body.get("token")
        if not isinstance(raw, str) or not TOKEN.fullmatch(raw):
            raise ProviderError(f"github {self.name}: token create returned no usable token")
        return Secret(raw), parse_time(body.get("expires_at"))

    def _granted_problem(self, request: GitHubRequest, response: ApiResponse) -> str:
        """Why the token is not exactly what was asked (plus metadata: read), or "" when it is."""
        body: dict[str, Any] = response.body
        asked = request.permission_map()
        granted = body.get("permissions")
        if not isinstance(granted, dict):
            return "the answer does not say which permissions it carries"
        implicit_name, implicit_level = IMPLICIT_PERMISSION
        if implicit_name not in asked and granted.get(implicit_name) == implicit_level:
            granted = {k: v for k, v in granted.items() if k != implicit_name}
        if granted != asked:
            diff = sorted(
                [f"+{k}: {v}" for k, v in granted.items() if asked.get(k) != v]
                + [f"-{k}: {v}" for k, v in asked.items() if granted.get(k) != v]
            )
            return f"its permissions differ from the request ({', '.join(diff)[:200]})"
        repos = body.get("repositories")
        names = (
            {str(r.get("full_name", "")).lower() for r in repos if isinstance(r, dict)}
            if isinstance(repos, list)
            else None
        )
        if body.get("repository_selection") != "selected" or names != {r.lower() for r in request.repositories}:
            return "its repositories differ from the request"
        return ""

    def revoke(self, target: RevokeTarget, now: datetime) -> RevokeOutcome:
        if target.revoke_secret is None:  # the keep-safe was lost (a reboot): only GitHub's hour ends it
            ends = self._token_end(target)
            if ends is not None and aware(now) >= ends:
                return RevokeOutcome.EXPIRED
            until = f"GitHub's one-hour expiry at {iso(ends)}" if ends else "GitHub's one-hour expiry"
            raise ProviderError(
                f"github {self.name}: no token kept for {target.name}, so it cannot be revoked;"
                f" it stays valid until {until}",
                retryable=False,
            )
        response = self.api.call("DELETE", "/installation/token", what="token revoke", token=target.revoke_secret)
        if response.status == 204:  # it was live at GitHub until now, whatever our expires_at says
            return RevokeOutcome.REVOKED
        if response.status == 401:  # already revoked, or expired at GitHub
            past = target.expires_at is not None and aware(target.expires_at) <= aware(now)
            return RevokeOutcome.EXPIRED if past else RevokeOutcome.REVOKED
        raise self._failure(response, f"token revoke for {target.name}", retryable=True)

    def _token_end(self, target: RevokeTarget) -> datetime | None:
        """When the token dies at GitHub: as GitHub said at minting, else an hour after its ``expires_at``.

        (Credentials recorded before the broker kept GitHub's own expiry were minted before their
        ``expires_at``, so their hour is over an hour after it at the latest.)
        """
        recorded = parse_time(target.reference.get("token_expires_at"))
        if recorded is not None:
            return recorded
        if target.expires_at is None:
            return None
        return aware(target.expires_at) + timedelta(seconds=self.fixed_lifetime or 0)

    def _failure(self, response: ApiResponse, action: str, *, retryable: bool = False) -> ProviderError:
        """A one-line error quoting GitHub's message; retryable for outages and rate limits."""
        status = response.status
        hint = {
            401: " (check app_id, the private key and this host's clock)",
            403: " (forbidden or rate limited)",
            429: " (rate limited)",
        }.get(status, "")
        return ProviderError(
            f"github {self.name}: {action} failed: {response.message()}{hint}",
            retryable=retryable or status >= 500 or status in (403, 429),
        )

    def close(self) -> None:
        self.api.close()
