"""What the GitHub App emulator knows and decides: the App, its installations, its tokens.

Kept apart from HTTP so the rules read plainly: App JWT checks (RS256 only,
``exp`` in the future and at most 600 s ahead, ``iat`` not in the future,
``iss`` the App id or client id), the mint rules of
``POST /app/installations/{id}/access_tokens`` (500-repository cap, repositories
and permissions within the installation, known permission names and levels,
one-hour expiry from the injectable clock, GitHub's implicit
``metadata: read``), and revocation. Messages in quotes below are GitHub's own
where PROVIDERS.md cites them; the others are the emulator's wording.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import string
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import jwt

from devstack import github_shapes as shapes
from providers.github.permissions import PERMISSIONS, rank

TOKEN_TTL = 3600
MAX_JWT_AHEAD = 600
IAT_SKEW = 30
MAX_REPOSITORIES = 500
NOT_ACCESSIBLE = "There is at least one repository that does not exist or is not accessible to the parent installation."
NOT_GRANTED = "The permissions requested are not granted to this installation."
BAD_JWT = "A JSON web token could not be decoded"
BAD_CREDENTIALS = "Bad credentials"
TokenStatus = Literal["valid", "revoked", "expired", "unknown"]


@dataclass(frozen=True)
class Repo:
    id: int
    name: str


@dataclass(frozen=True)
class Installation:
    id: int
    account: str
    account_type: str  # "Organization" or "User"
    account_id: int
    repositories: tuple[Repo, ...]
    permissions: Mapping[str, str]
    selection: str = "selected"

    def repo(self, name: str) -> Repo | None:
        return next((r for r in self.repositories if r.name.lower() == name.lower()), None)


@dataclass(frozen=True)
class IssuedToken:
    installation_id: int
    permissions: Mapping[str, str]
    repositories: tuple[str, ...]  # owner/name; empty: every repository of the installation
    expires_at: float
    revoked: bool = False


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _error(status: int, message: str) -> Reply:
    return Reply(status, shapes.basic_error(message, status))


def _invalid(message: str, **error: Any) -> Reply:
    return Reply(422, shapes.validation_error(message, [{"code": "invalid", **error}] if error else None))


class AppState:
    """One GitHub App with its installations and the tokens minted so far (thread-safe)."""

    def __init__(
        self,
        *,
        app_id: int,
        public_key_pem: bytes,
        client_id: str,
        slug: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app_id = app_id
        self.client_id = client_id
        self.slug = slug
        self.clock = clock
        self.offset = 0.0
        self.token_ttl = TOKEN_TTL  # a test crossing a real expiry shortens GitHub's hour
        # Fault injection: "permissions", "repositories" or "all" makes mints ignore that narrowing.
        self.overgrant = ""
        self.installations: dict[int, Installation] = {}
        self.tokens: dict[str, IssuedToken] = {}
        self._public_key = public_key_pem
        self._lock = threading.Lock()
        self._next_id = 1296269

    def now(self) -> float:
        return self.clock() + self.offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.offset += seconds

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_installation(
        self,
        account: str,
        repositories: Sequence[str],
        permissions: Mapping[str, str],
        *,
        account_type: str = "Organization",
        selection: str = "selected",
        installation_id: int | None = None,
    ) -> Installation:
        with self._lock:
            ident = installation_id or 40_000_001 + len(self.installations)
            repos = tuple(Repo(self._new_id(), name) for name in repositories)
            inst = Installation(ident, account, account_type, self._new_id(), repos, dict(permissions), selection)
            self.installations[ident] = inst
            return inst

    # -- authentication ------------------------------------------------------------------

    def check_jwt(self, authorization: str) -> str | None:
        """Why the App JWT in ``authorization`` is refused, or None when it is good."""
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() != "bearer" or not credential:
            return BAD_JWT
        try:
            if jwt.get_unverified_header(credential).get("alg") != "RS256":
                return BAD_JWT
            payload = jwt.PyJWS().decode(credential, self._public_key, algorithms=["RS256"])
            claims = json.loads(payload)
        except (jwt.PyJWTError, ValueError):
            return BAD_JWT
        if not isinstance(claims, dict):
            return BAD_JWT
        iat, exp, iss = claims.get("iat"), claims.get("exp"), claims.get("iss")
        now = self.now()
        if not isinstance(iat, int) or isinstance(iat, bool) or iat > now + IAT_SKEW:
            return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued"
        if not isinstance(exp, int | float) or isinstance(exp, bool) or exp <= now:
            return (
                "'Expiration time' claim ('exp') must be a numeric value representing the future time"
                " at which the assertion expires"
            )
        if exp - now > MAX_JWT_AHEAD:
            return "'Expiration time' claim ('exp') is too far in the future"
        if str(iss) not in (str(self.app_id), self.client_id):
            return "'Issuer' claim ('iss') does not name this App"
        return None

    def token_from(self, authorization: str) -> str | None:
        """The installation token in ``authorization`` when it is live, else None."""
        scheme, _, credential = authorization.partition(" ")
        if scheme.lower() not in ("bearer", "token") or self.token_state(credential) != "valid":
            return None
        return credential

    def token_state(self, token: str) -> TokenStatus:
        with self._lock:
            issued = self.tokens.get(token)
        if issued is None:
            return "unknown"
        if issued.revoked:
            return "revoked"
        return "valid" if self.now() < issued.expires_at else "expired"

    # -- routes --------------------------------------------------------------------------

    def _account(self, base: str, inst: Installation) -> dict[str, Any]:
        return shapes.user(base, inst.account, inst.account_id, inst.account_type)

    def installation_body(self, base: str, inst: Installation) -> dict[str, Any]:
        return shapes.installation(
            base,
            ident=inst.id,
            app_id=self.app_id,
            slug=self.slug,
            client_id=self.client_id,
            account=self._account(base, inst),
            permissions=inst.permissions,
            selection=inst.selection,
        )

    def get_app(self, base: str) -> Reply:
        owner = shapes.user(base, "broker-tests", 1, "Organization")
        body = shapes.integration(base, self.app_id, self.slug, self.client_id, owner)
        body["installations_count"] = len(self.installations)
        return Reply(200, body)

    def list_installations(self, base: str, per_page: int, page: int) -> Reply:
        per_page = min(max(per_page, 1), 100)
        page = max(page, 1)
        with self._lock:
            every = sorted(self.installations.values(), key=lambda i: i.id)
        last = max((len(every) + per_page - 1) // per_page, 1)
        chunk = every[(page - 1) * per_page : page * per_page]
        links = []
        url = f"{base}/app/installations?per_page={per_page}&page="
        if page < last:
            links += [f'<{url}{page + 1}>; rel="next"', f'<{url}{last}>; rel="last"']
        if page > 1:
            links += [f'<{url}{page - 1}>; rel="prev"', f'<{url}1>; rel="first"']
        headers = {"Link": ", ".join(links)} if links else {}
        return Reply(200, [self.installation_body(base, i) for i in chunk], headers)

    def get_installation(self, base: str, ident: str) -> Reply:
        inst = self.installations.get(int(ident)) if ident.isdigit() else None
        if inst is None:
            return _error(404, "Not Found")
        return Reply(200, self.installation_body(base, inst))

    def find_installation(self, base: str, kind: str, owner: str, repo: str = "") -> Reply:
        for inst in self.installations.values():
            if inst.account.lower() != owner.lower():
                continue
            if kind == "orgs" and inst.account_type != "Organization":
                continue
            if kind == "repos" and inst.repo(repo) is None:
                continue
            return Reply(200, self.installation_body(base, inst))
        return _error(404, "Not Found")

    def create_token(self, base: str, ident: str, body: object) -> Reply:
        inst = self.installations.get(int(ident)) if ident.isdigit() else None
        if inst is None:
            return _error(404, "Not Found")
        if body is None:
            body = {}
        if not isinstance(body, dict):
            return _invalid("Invalid request.\n\nThe request body must be an object.")
        names, ids, asked = body.get("repositories"), body.get("repository_ids"), body.get("permissions")
        if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            return _invalid("Invalid request.\n\nFor 'repositories', the value is not an array of strings.")
        if ids is not None and not (
            isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
        ):
            return _invalid("Invalid request.\n\nFor 'repository_ids', the value is not an array of integers.")
        if asked is not None and not isinstance(asked, dict):
            return _invalid("Invalid request.\n\nFor 'permissions', the value is not an object.")
        names, ids = names or [], ids or []
        if len(names) + len(ids) > MAX_REPOSITORIES:
            return _invalid(f"Too many repositories: at most {MAX_REPOSITORIES} can be listed.")
        for name, level in (asked or {}).items():
            if name not in PERMISSIONS:
                return _invalid(f"The permission {name!r} does not exist.", field="permissions", value=name)
            if level not in PERMISSIONS[name]:
                return _invalid(f"The level {level!r} is not valid for {name!r}.", field="permissions")
        granted = dict(asked) if asked else dict(inst.permissions)
        if any(n not in inst.permissions or rank(lv) > rank(inst.permissions[n]) for n, lv in granted.items()):
            return _invalid(NOT_GRANTED)
        if asked and "metadata" not in granted and "metadata" in inst.permissions:
            granted["metadata"] = "read"  # GitHub adds it to every token, asked for or not
        repos = [inst.repo(n) for n in names] + [next((r for r in inst.repositories if r.id == i), None) for i in ids]
        chosen = [r for r in repos if r is not None]
        if len(chosen) != len(repos):
            return _invalid(NOT_ACCESSIBLE)
        chosen = list(dict.fromkeys(chosen))
        if self.overgrant in ("permissions", "all"):
            granted = dict(inst.permissions)
        if self.overgrant in ("repositories", "all"):
            chosen = list(inst.repositories)
        return self._issue(base, inst, granted, chosen, selected=bool(names or ids))

    def _issue(
        self, base: str, inst: Installation, granted: dict[str, str], chosen: list[Repo], selected: bool
    ) -> Reply:
        alphabet = string.ascii_letters + string.digits
        token = "ghs_" + "".join(secrets.choice(alphabet) for _ in range(40 + secrets.randbelow(24)))
        expires = self.now() + self.token_ttl
        full = tuple(f"{inst.account}/{r.name}" for r in chosen) if selected else ()
        with self._lock:
            self.tokens[token] = IssuedToken(inst.id, granted, full, expires)
        body: dict[str, Any] = {
            "token": token,
            "expires_at": shapes.iso(expires),
            "permissions": granted,
            "repository_selection": "selected" if selected else inst.selection,
        }
        if selected:
            owner = self._account(base, inst)
            body["repositories"] = [shapes.repository(base, owner, r.id, r.name) for r in chosen]
        return Reply(201, body)

    def token_repositories(self, base: str, token: str) -> Reply:
        """``GET /installation/repositories`` as an installation token sees it (names only: what tests read)."""
        with self._lock:
            issued = self.tokens[token]
        inst = self.installations[issued.installation_id]
        names = issued.repositories or tuple(f"{inst.account}/{r.name}" for r in inst.repositories)
        repositories = [{"full_name": name} for name in names]
        return Reply(200, {"total_count": len(repositories), "repositories": repositories})

    def revoke(self, token: str) -> Reply:
        with self._lock:
            self.tokens[token] = dataclasses.replace(self.tokens[token], revoked=True)
        return Reply(204)
