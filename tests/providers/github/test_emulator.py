"""The GitHub App emulator: its answers match the official OpenAPI contract, and it enforces GitHub's rules."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import jwt
import pytest
import requests
from cryptography.hazmat.primitives import serialization
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

from devstack.github_app import GitHubAppEmulator
from devstack.github_state import NOT_ACCESSIBLE, NOT_GRANTED
from tests.fixtures.github import APP_ID, CLIENT_ID, GITHUB_CONTRACT, OWNER, PERMISSIONS, AppKeys, rsa_key_pair

pytestmark = pytest.mark.server

BASE = "urn:github-app-api"
HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}
TOKENS = "/app/installations/{installation_id}/access_tokens"


@cache
def spec() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(GITHUB_CONTRACT.read_text(encoding="utf-8"))
    return loaded


def validator(pointer: str) -> OAS30Validator:
    registry: Registry[Any] = Registry().with_resource(
        BASE, Resource.from_contents(spec(), default_specification=DRAFT4)
    )
    return OAS30Validator({"$ref": f"{BASE}#{pointer}"}, registry=registry)


def response_validator(path: str, method: str, status: str) -> OAS30Validator:
    resp = spec()["paths"][path][method]["responses"][status]
    ptr = "/paths/" + path.replace("~", "~0").replace("/", "~1") + f"/{method}/responses/{status}"
    if "$ref" in resp:
        ptr = resp["$ref"][1:]
    return validator(f"{ptr}/content/application~1json/schema")


def assert_matches(path: str, method: str, response: requests.Response) -> None:
    assert response.headers["Content-Type"].startswith("application/json")
    v = response_validator(path, method, str(response.status_code))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in v.iter_errors(response.json())]
    assert not errors, errors


def app_jwt(keys: AppKeys, *, now: float | None = None, iat: int = -60, exp: int = 540, iss: object = None) -> str:
    moment = int(time.time() if now is None else now)
    claims = {"iat": moment + iat, "exp": moment + exp, "iss": str(APP_ID) if iss is None else iss}
    payload = json.dumps(claims).encode()
    return jwt.PyJWS().encode(payload, loaded_key(keys.private_pem), algorithm="RS256")


@cache
def loaded_key(pem: bytes) -> Any:
    """The parsed key (parsing a PEM RSA key costs tens of milliseconds)."""
    return serialization.load_pem_private_key(pem, password=None)


def hs256_with_public_key(public_pem: bytes, now: float) -> str:
    """The old algorithm-confusion attack: an HMAC "signed" with the App's public key."""

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    claims = {"iat": int(now) - 60, "exp": int(now) + 300, "iss": str(APP_ID)}
    signing = part(b'{"alg":"HS256","typ":"JWT"}') + "." + part(json.dumps(claims).encode())
    mac = hmac.new(public_pem, signing.encode(), hashlib.sha256).digest()
    return signing + "." + part(mac)


class Client:
    def __init__(self, emulator: GitHubAppEmulator, keys: AppKeys) -> None:
        self.emulator, self.keys = emulator, keys
        self.http = requests.Session()

    def call(self, method: str, path: str, *, auth: str | None = None, **kwargs: Any) -> requests.Response:
        headers = dict(HEADERS)
        credential = auth if auth is not None else app_jwt(self.keys, now=self.emulator.state.now())
        if credential:
            headers["Authorization"] = f"Bearer {credential}"
        return self.http.request(method, self.emulator.url + path, headers=headers, timeout=10, **kwargs)

    def installation_id(self) -> int:
        ident: int = self.call("GET", f"/orgs/{OWNER}/installation").json()["id"]
        return ident

    def mint(self, body: dict[str, Any] | None = None) -> requests.Response:
        return self.call("POST", f"/app/installations/{self.installation_id()}/access_tokens", json=body)


@pytest.fixture
def client(github_emulator: GitHubAppEmulator, github_app_keys: AppKeys) -> Iterator[Client]:
    c = Client(github_emulator, github_app_keys)
    yield c
    c.http.close()


ASK = {"repositories": ["widgets"], "permissions": {"contents": "write"}}


# -- the contract ------------------------------------------------------------------------


def test_app_and_installation_lookups_match_the_contract(client: Client) -> None:
    ident = client.installation_id()
    assert_matches("/app", "get", client.call("GET", "/app"))
    for path, template in [
        (f"/orgs/{OWNER}/installation", "/orgs/{org}/installation"),
        (f"/users/{OWNER}/installation", "/users/{username}/installation"),
        (f"/repos/{OWNER}/widgets/installation", "/repos/{owner}/{repo}/installation"),
        (f"/app/installations/{ident}", "/app/installations/{installation_id}"),
    ]:
        response = client.call("GET", path)
        assert response.status_code == 200, path
        assert response.json()["id"] == ident
        assert_matches(template, "get", response)
    missing = client.call("GET", "/repos/octo-org/not-there/installation")
    assert missing.status_code == 404
    assert_matches("/repos/{owner}/{repo}/installation", "get", missing)
    assert_matches("/app/installations/{installation_id}", "get", client.call("GET", "/app/installations/999"))


def test_listing_pages_with_link_headers(client: Client, github_emulator: GitHubAppEmulator) -> None:
    for owner in ("alpha", "beta", "gamma", "delta"):
        github_emulator.add_installation(owner, ["repo"], {"contents": "read"})
    first = client.call("GET", "/app/installations?per_page=2")
    assert_matches("/app/installations", "get", first)
    assert len(first.json()) == 2
    assert first.links["next"]["url"].endswith("per_page=2&page=2")
    assert first.links["last"]["url"].endswith("page=3")
    last = client.call("GET", "/app/installations?per_page=2&page=3")
    assert len(last.json()) == 1 and "next" not in last.links and "prev" in last.links
    assert "Link" not in client.call("GET", "/app/installations?per_page=100").headers


def test_mint_and_errors_match_the_contract(client: Client) -> None:
    body_schema = validator(
        "/paths/~1app~1installations~1{installation_id}~1access_tokens/post/requestBody/content/application~1json/schema"
    )
    assert not list(body_schema.iter_errors(ASK))
    minted = client.mint(ASK)
    assert minted.status_code == 201
    assert_matches(TOKENS, "post", minted)
    refused = client.mint({"repositories": ["elsewhere"], "permissions": {"contents": "read"}})
    assert refused.status_code == 422
    assert_matches(TOKENS, "post", refused)
    unauthenticated = client.call("POST", f"/app/installations/{client.installation_id()}/access_tokens", auth="")
    assert unauthenticated.status_code == 401
    assert_matches(TOKENS, "post", unauthenticated)
    unknown = client.call("POST", "/app/installations/12345/access_tokens", json=ASK)
    assert unknown.status_code == 404
    assert_matches(TOKENS, "post", unknown)
    revoked = client.call("DELETE", "/installation/token", auth=minted.json()["token"])
    assert revoked.status_code == 204 and not revoked.content


def test_token_shape(client: Client) -> None:
    tokens = {client.mint(ASK).json()["token"] for _ in range(12)}
    assert all(t.startswith("ghs_") and len(t) != 36 and len(t) != 40 for t in tokens)
    assert len({len(t) for t in tokens}) > 1  # lengths vary: nobody may assume one


# -- JWT checks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    ["none", "garbage", "expired", "too-far", "iat-future", "wrong-iss", "wrong-key", "hs256", "alg-none"],
)
def test_bad_app_jwts_get_401(client: Client, github_app_keys: AppKeys, case: str) -> None:
    now = client.emulator.state.now()
    public = github_app_keys.public_pem
    tokens = {
        "none": "",
        "garbage": "not-a-jwt",
        "expired": app_jwt(github_app_keys, now=now, iat=-700, exp=-5),
        "too-far": app_jwt(github_app_keys, now=now, iat=0, exp=602),
        "iat-future": app_jwt(github_app_keys, now=now, iat=120, exp=500),
        "wrong-iss": app_jwt(github_app_keys, now=now, iss="999"),
        "wrong-key": app_jwt(rsa_key_pair(), now=now),
        "hs256": hs256_with_public_key(public, now),
        "alg-none": jwt.encode({"iat": int(now), "exp": int(now) + 300, "iss": str(APP_ID)}, None, algorithm="none"),  # type: ignore[arg-type]
    }
    response = client.call("GET", "/app", auth=tokens[case])
    assert response.status_code == 401
    assert_matches("/app/installations/{installation_id}/access_tokens", "post", response)


def test_good_jwts(client: Client, github_app_keys: AppKeys) -> None:
    now = client.emulator.state.now()
    for iss in (str(APP_ID), APP_ID, CLIENT_ID):
        assert client.call("GET", "/app", auth=app_jwt(github_app_keys, now=now, iss=iss)).status_code == 200
    edge = app_jwt(github_app_keys, now=now, iat=10, exp=600)  # small skew and the 600 s limit are fine
    assert client.call("GET", "/app", auth=edge).status_code == 200


def test_an_installation_token_is_not_an_app_jwt(client: Client) -> None:
    token = client.mint(ASK).json()["token"]
    assert client.call("GET", "/app", auth=token).status_code == 401


# -- mint rules --------------------------------------------------------------------------


def test_mint_grants_exactly_what_was_asked(client: Client) -> None:
    body = client.mint({"repositories": ["widgets", "Docs-Site"], "permissions": {"contents": "read"}}).json()
    assert body["permissions"] == {"contents": "read", "metadata": "read"}  # GitHub's implicit metadata
    assert body["repository_selection"] == "selected"
    assert [r["full_name"] for r in body["repositories"]] == ["octo-org/widgets", "octo-org/docs-site"]
    issued = client.emulator.state.tokens[body["token"]]
    assert issued.repositories == ("octo-org/widgets", "octo-org/docs-site")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"repositories": ["widgets"], "permissions": {"administration": "write"}}, NOT_GRANTED),
        ({"repositories": ["widgets"], "permissions": {"metadata": "write"}}, NOT_GRANTED),
        ({"repositories": ["widgets"], "permissions": {"pull-requests": "write"}}, "does not exist"),
        ({"repositories": ["widgets"], "permissions": {"workflows": "read"}}, "not valid"),
        (
            {"repositories": ["widgets", "private-elsewhere"], "permissions": {"contents": "read"}},
            NOT_ACCESSIBLE,
        ),
        ({"repository_ids": [1], "permissions": {"contents": "read"}}, NOT_ACCESSIBLE),
        ({"repositories": "widgets"}, "not an array"),
    ],
)
def test_mint_refusals(client: Client, body: dict[str, Any], message: str) -> None:
    response = client.mint(body)
    assert response.status_code == 422
    assert message in response.json()["message"]
    assert_matches(TOKENS, "post", response)
    assert not client.emulator.state.tokens


def test_mint_without_narrowing_gets_everything(client: Client) -> None:
    bodies: tuple[dict[str, list[str]] | None, ...] = (None, {"repositories": []})
    for body in bodies:
        minted = client.mint(body).json()
        assert minted["permissions"] == PERMISSIONS
        assert "repositories" not in minted and minted["repository_selection"] == "selected"


def test_500_repositories_at_most(client: Client, github_emulator: GitHubAppEmulator) -> None:
    names = [f"repo-{i}" for i in range(501)]
    inst = github_emulator.add_installation("big-org", names, {"contents": "read"})
    path = f"/app/installations/{inst.id}/access_tokens"
    ok = client.call("POST", path, json={"repositories": names[:500], "permissions": {"contents": "read"}})
    assert ok.status_code == 201 and len(ok.json()["repositories"]) == 500
    too_many = client.call("POST", path, json={"repositories": names, "permissions": {"contents": "read"}})
    assert too_many.status_code == 422
    assert_matches(TOKENS, "post", too_many)


# -- expiry and revocation ---------------------------------------------------------------


def test_expiry_follows_the_injectable_clock(github_app_keys: AppKeys) -> None:
    start = 1_900_000_000.0
    with GitHubAppEmulator(app_id=APP_ID, public_key_pem=github_app_keys.public_pem, clock=lambda: start) as emu:
        emu.add_installation(OWNER, ["widgets"], {"contents": "write"})
        client = Client(emu, github_app_keys)
        body = client.mint(ASK).json()
        assert body["expires_at"] == "2030-03-17T18:46:40Z"  # start + 3600 s, to the second
        token = body["token"]
        emu.advance(3599)
        assert emu.token_state(token) == "valid"
        emu.advance(1)
        assert emu.token_state(token) == "expired"
        assert client.call("DELETE", "/installation/token", auth=token).status_code == 401
        assert emu.token_state(token) == "expired"


def test_revocation(client: Client) -> None:
    token = client.mint(ASK).json()["token"]
    assert client.emulator.token_state(token) == "valid"
    assert client.call("DELETE", "/installation/token", auth=token).status_code == 204
    assert client.emulator.token_state(token) == "revoked"
    again = client.call("DELETE", "/installation/token", auth=token)
    assert again.status_code == 401 and again.json()["message"] == "Bad credentials"
    assert client.call("DELETE", "/installation/token", auth="ghs_unknown").status_code == 401
    assert client.emulator.token_state("ghs_unknown") == "unknown"


# -- knobs and the catch-all -------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/rate_limit"),
        ("POST", "/app"),
        ("PUT", "/installation/token"),
        ("GET", "/repos/a/b"),
        ("GET", "/"),
    ],
)
def test_unknown_routes_answer_501(client: Client, method: str, path: str) -> None:
    response = client.call(method, path)
    assert response.status_code == 501
    assert "Not Implemented" in response.json()["message"]


def test_outage_delay_and_forced_statuses(client: Client) -> None:
    token = client.mint(ASK).json()["token"]
    client.emulator.fail_revocations = True
    assert client.call("DELETE", "/installation/token", auth=token).status_code == 503
    assert client.emulator.token_state(token) == "valid"
    client.emulator.delays["get_app"] = 0.3
    started = time.monotonic()
    assert client.call("GET", "/app").status_code == 200
    assert time.monotonic() - started >= 0.3
    client.emulator.force("get_app", 502, 429, retry_after=7)
    assert client.call("GET", "/app").status_code == 502
    limited = client.call("GET", "/app")
    assert limited.status_code == 429 and limited.headers["Retry-After"] == "7"
    assert client.call("GET", "/app").status_code == 200


def test_other_api_versions_are_refused(client: Client) -> None:
    response = client.http.get(
        client.emulator.url + "/app",
        headers={"X-GitHub-Api-Version": "2026-03-10", "Authorization": f"Bearer {app_jwt(client.keys)}"},
        timeout=10,
    )
    assert response.status_code == 400


def test_command_line(tmp_path: Path, github_app_keys: AppKeys) -> None:
    public = tmp_path / "app.pub.pem"
    public.write_bytes(github_app_keys.public_pem)
    root = Path(__file__).resolve().parents[3]
    args = [sys.executable, "-m", "devstack.github_app", "--port", "0", "--app-id", str(APP_ID)]
    args += ["--public-key", str(public), "--installation", "octo-org:widgets,docs-site:contents=write"]
    process = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip().rsplit(" ", 1)[-1]
        headers = {**HEADERS, "Authorization": f"Bearer {app_jwt(github_app_keys)}"}
        response = requests.get(url + "/orgs/octo-org/installation", headers=headers, timeout=10)
        assert response.status_code == 200
        assert response.json()["account"]["login"] == "octo-org"
    finally:
        process.terminate()
        assert process.wait(timeout=10) == 0
