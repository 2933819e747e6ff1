"""Whether a child manifest is covered by its parent session: every way a child can be wider, named by its key.

Each provider says what narrower means for its credentials
(the ``Narrowing`` capability): GitHub repositories and permission levels, Vault
policies, uses, kinds, roles, certificate names and SSH principals, the AWS
role, managed policies and session policy (containment of every action and
resource, the parent's conditions and Deny statements kept). The core pairs
credentials and checks TTLs, network, sandbox identity and proxy injection.
These run ``cover`` on parsed manifests, without servers; the real socket and
real minting are ``tests/integration/core/test_delegation*.py`` and
``tests/integration/daemon/test_delegation.py``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from broker.core.delegation.coverage import cover
from broker.core.inputs.config import Config, parse_config
from broker.core.inputs.manifest import Manifest, parse_manifest
from broker.core.store.interface import CredentialRecord, SessionRecord
from broker.core.store.states import CredentialState, SessionState

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ROLE = "arn:aws:iam::123456789012:role/agent-ci"
MANAGED = "arn:aws:iam::123456789012:policy/ci-read"
READ_WRITE = {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject"], "Resource": ["arn:aws:s3:::ci/*"]}
NO_SECRETS = {"Effect": "Deny", "Action": ["s3:GetObject"], "Resource": ["arn:aws:s3:::ci/secrets/*"]}
PARENT_CREDENTIALS: list[dict[str, Any]] = [
    {
        "name": "repo",
        "provider": "github",
        "repositories": ["octo-org/widgets", "octo-org/docs"],
        "permissions": {"contents": "read", "pull_requests": "read"},
    },
    {
        "name": "artifacts",
        "provider": "aws",
        "role_arn": ROLE,
        "ttl": "20m",
        "policy_arns": [MANAGED],
        "session_policy": {"Version": "2012-10-17", "Statement": [READ_WRITE, NO_SECRETS]},
    },
    {"name": "kv", "provider": "vault", "policies": ["ci-read", "ci-write"], "num_uses": 5},
    {
        "name": "cert",
        "provider": "vault",
        "kind": "pki",
        "role": "agent",
        "common_name": "a.ci.internal",
        "alt_names": ["b.ci.internal"],
    },
    {"name": "ssh", "provider": "vault", "kind": "ssh", "role": "agent", "principals": ["git", "deploy"]},
]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    table = {
        "providers": {
            "vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"},
            "aws": {"type": "aws_sts", "region": "us-east-1"},
            "github": {"type": "github_app", "app_id": "1", "private_key_file": "k.pem"},
        },
    }
    return parse_config(table, tmp_path / "broker.toml")


def _manifest(config: Config, credentials: list[dict[str, Any]], **top: Any) -> Manifest:
    document = {"version": 1, "task": "fix-1", "credentials": credentials, **top}
    return parse_manifest(json.dumps(document).encode(), config, as_json=True, identity=(1000, 1000))


def _parent(config: Config, **changes: Any) -> tuple[SessionRecord, Manifest, list[CredentialRecord]]:
    network = changes.pop("network", {"allow": ["github.com:443", "*.pypi.org:443"]})
    credentials = changes.pop("credentials", PARENT_CREDENTIALS)
    manifest = _manifest(config, credentials, ttl="30m", network=network)
    record = SessionRecord(
        id="s-parent000001",
        task="fix-1",
        requester="ci",
        state=SessionState.ACTIVE,
        created_at=NOW,
        expires_at=changes.pop("expires_at", NOW + timedelta(minutes=30)),
        dir="/run/broker/s-parent000001",
        mount_path="/run/secrets",
        uid=1000,
        gid=1000,
        mounted=True,
        document=None,
        manifest={"json": True, "text": manifest.source},
        delegate_depth=1,
    )
    ends = changes.pop("credential_ends", {})
    states = changes.pop("credential_states", {})
    held = [
        CredentialRecord(
            session_id=record.id,
            name=str(c["name"]),
            provider=str(c["provider"]),
            type="x",
            state=states.get(c["name"], CredentialState.ACTIVE),
            reference={},
            scope={},
            expires_at=ends.get(c["name"], NOW + timedelta(minutes=20)),
            fingerprint=None,
        )
        for c in credentials
    ]
    return record, manifest, held


def _reasons(config: Config, credentials: list[dict[str, Any]], **top: Any) -> list[str]:
    parent_changes = top.pop("parent", {})
    record, parent_manifest, held = _parent(config, **parent_changes)
    reasons, decision = cover(config, record, parent_manifest, held, _manifest(config, credentials, **top), NOW)
    assert (decision is None) == bool(reasons)
    return reasons


def _keys(reasons: list[str]) -> list[str]:
    return [reason.split(": ", 1)[0] for reason in reasons]


GITHUB = {
    "name": "repo",
    "provider": "github",
    "repositories": ["octo-org/widgets"],
    "permissions": {"contents": "read"},
}
AWS: dict[str, Any] = {
    "name": "artifacts",
    "provider": "aws",
    "role_arn": ROLE,
    "ttl": "15m",
    "session_policy": {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ci/build/*"},
            NO_SECRETS,
        ],
    },
}


def _aws(statements: list[dict[str, Any]] | None = None, **changes: Any) -> dict[str, Any]:
    credential = {**AWS, **changes}
    if statements is not None:
        credential["session_policy"] = {"Version": "2012-10-17", "Statement": statements}
    return {k: v for k, v in credential.items() if v is not None}


def test_narrower_children_of_every_provider_are_covered(config: Config) -> None:
    kv = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 1}
    cert = {"name": "cert", "provider": "vault", "kind": "pki", "role": "agent", "common_name": "b.ci.internal"}
    ssh = {"name": "ssh", "provider": "vault", "kind": "ssh", "role": "agent", "principals": ["git"]}
    upper = {**GITHUB, "repositories": ["Octo-Org/Docs"], "permissions": {"pull_requests": "read"}}
    credentials = [GITHUB, _aws(), kv, cert, ssh, {**upper, "name": "docs"}]
    assert _reasons(config, credentials, ttl="20m", network={"allow": ["files.pypi.org:443"]}) == []


@pytest.mark.parametrize(
    ("credential", "key"),
    [
        ({**GITHUB, "repositories": ["octo-org/widgets", "octo-org/other"]}, "credentials[0].repositories[1]"),
        ({**GITHUB, "permissions": {"contents": "write"}}, "credentials[0].permissions.contents"),
        ({**GITHUB, "permissions": {"issues": "read"}}, "credentials[0].permissions.issues"),
        (
            {**GITHUB, "name": "other", "permissions": {"pull_requests": "write"}},
            "credentials[0].permissions.pull_requests",
        ),
        ({"name": "kv", "provider": "vault", "policies": ["ci-admin"]}, "credentials[0].policies[0]"),
        ({"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 0}, "credentials[0].num_uses"),
        ({"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 9}, "credentials[0].num_uses"),
        ({"name": "kv", "provider": "vault", "kind": "database", "role": "agent"}, "credentials[0].kind"),
        (
            {"name": "cert", "provider": "vault", "kind": "pki", "role": "admin", "common_name": "a.ci.internal"},
            "credentials[0].role",
        ),
        (
            {"name": "cert", "provider": "vault", "kind": "pki", "role": "agent", "common_name": "z.ci.internal"},
            "credentials[0].common_name",
        ),
        (
            {
                "name": "cert",
                "provider": "vault",
                "kind": "pki",
                "role": "agent",
                "common_name": "a.ci.internal",
                "alt_names": ["c.ci.internal"],
            },
            "credentials[0].alt_names[0]",
        ),
        (
            {"name": "ssh", "provider": "vault", "kind": "ssh", "role": "agent", "principals": ["root"]},
            "credentials[0].principals[0]",
        ),
        (_aws(role_arn="arn:aws:iam::123456789012:role/admin"), "credentials[0].role_arn"),
        (_aws(policy_arns=["arn:aws:iam::123456789012:policy/admin"]), "credentials[0].policy_arns[0]"),
        (_aws(session_policy=None), "credentials[0].session_policy"),
        (
            _aws([{"Effect": "Allow", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::ci/*"}, NO_SECRETS]),
            "credentials[0].session_policy.Statement[0]",
        ),
        (
            _aws([{"Effect": "Allow", "Action": "s3:*", "Resource": "arn:aws:s3:::ci/*"}, NO_SECRETS]),
            "credentials[0].session_policy.Statement[0]",
        ),
        (
            _aws([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::other/*"}, NO_SECRETS]),
            "credentials[0].session_policy.Statement[0]",
        ),
        (
            _aws(
                [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ci/${aws:userid}"}, NO_SECRETS]
            ),
            None,
        ),  # a variable is read as a wildcard: within ci/*
        (
            _aws([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::*"}, NO_SECRETS]),
            "credentials[0].session_policy.Statement[0]",
        ),
        (
            _aws([{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::ci/*"}]),
            "credentials[0].session_policy",
        ),  # the parent's Deny is missing
        (
            _aws([{"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}, NO_SECRETS]),
            "credentials[0].session_policy.Statement[0]",
        ),
        (
            {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 1, "ttl": "25m"},
            "credentials[0].ttl",
        ),
    ],
)
def test_a_wider_child_is_refused_naming_the_key_that_widens(
    config: Config, credential: dict[str, Any], key: str | None
) -> None:
    reasons = _reasons(config, [credential], ttl="25m" if credential.get("ttl") == "25m" else "20m")
    if key is None:
        assert reasons == []
        return
    assert key in _keys(reasons), reasons


def test_the_parents_session_policy_conditions_are_kept(config: Config) -> None:
    source = {"StringEquals": {"s3:prefix": "build/"}}
    conditioned = {**READ_WRITE, "Condition": source}
    parent_credentials = [
        {**PARENT_CREDENTIALS[1], "session_policy": {"Version": "2012-10-17", "Statement": [conditioned]}}
    ]
    record, _, held = _parent(config)
    parent = _manifest(config, parent_credentials, ttl="30m")
    without = _manifest(config, [_aws([READ_WRITE])], ttl="20m")
    reasons, _ = cover(config, record, parent, held, without, NOW)
    assert _keys(reasons) == ["credentials[0].session_policy.Statement[0]"] * 2
    narrower = {**READ_WRITE, "Condition": {**source, "Bool": {"aws:SecureTransport": "true"}}}
    reasons, decision = cover(config, record, parent, held, _manifest(config, [_aws([narrower])], ttl="20m"), NOW)
    assert reasons == [] and decision is not None


def test_a_parent_with_the_roles_full_permissions_covers_any_session_policy(config: Config) -> None:
    full = [{"name": "artifacts", "provider": "aws", "role_arn": ROLE, "ttl": "20m"}]
    record, _, held = _parent(config)
    parent = _manifest(config, full, ttl="30m")
    wide = _aws([{"Effect": "Allow", "Action": "*", "Resource": "*"}])
    reasons, _ = cover(config, record, parent, held, _manifest(config, [wide], ttl="20m"), NOW)
    assert reasons == []
    reasons, _ = cover(config, record, parent, held, _manifest(config, [_aws(session_policy=None)], ttl="20m"), NOW)
    assert reasons == []


@pytest.mark.parametrize(
    ("top", "parent", "key"),
    [
        ({"ttl": "45m"}, {}, "ttl"),
        ({"ttl": "10m", "network": {"allow": ["example.com:443"]}}, {}, "network.allow[0]"),
        ({"ttl": "10m", "network": {"allow": ["*.github.com:443"]}}, {}, "network.allow[0]"),
        ({"ttl": "10m", "network": {"allow": ["pypi.org:443"]}}, {}, "network.allow[0]"),  # *.pypi.org: not itself
        ({"ttl": "10m", "sandbox": {"uid": 0, "gid": 1000}}, {}, "sandbox"),
    ],
)
def test_the_session_wide_keys_are_checked_too(
    config: Config, top: dict[str, Any], parent: dict[str, Any], key: str
) -> None:
    reasons = _reasons(config, [GITHUB], parent=parent, **top)
    assert key in _keys(reasons), reasons


def test_a_child_credential_needs_a_live_parent_credential_with_time_left(config: Config) -> None:
    kv = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 1}
    revoked = _reasons(config, [kv], ttl="10m", parent={"credential_states": {"kv": CredentialState.REVOKED}})
    assert _keys(revoked) == ["credentials[0]"] and "no longer active" in revoked[0]
    near_end = {"credential_ends": {"artifacts": NOW + timedelta(minutes=10)}}
    aws = _reasons(config, [_aws(ttl=None)], ttl="10m", parent=near_end)
    assert _keys(aws) == ["credentials[0].ttl"] and "minimum" in aws[0]  # AWS asks for 15 minutes at least
    github = {"name": "repo", "provider": "github", "repositories": ["o/r"], "permissions": {"contents": "read"}}
    record, _, held = _parent(config)
    only_vault = _manifest(config, [PARENT_CREDENTIALS[2]], ttl="30m")
    reasons, _ = cover(config, record, only_vault, held, _manifest(config, [github], ttl="20m"), NOW)
    assert _keys(reasons) == ["credentials[0].provider"]


def test_the_decision_caps_each_child_credential_by_what_its_parent_credential_has_left(config: Config) -> None:
    kv = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 1}
    record, manifest, held = _parent(config, credential_ends={"kv": NOW + timedelta(minutes=4)})
    reasons, decision = cover(config, record, manifest, held, _manifest(config, [kv], ttl="20m"), NOW)
    assert reasons == [] and decision is not None
    assert decision.session_ttl == 1200 and decision.credential("kv").ttl == 240
    assert decision.delegation.depth == 0 and decision.approval is None


def test_a_credential_the_parent_keeps_in_its_proxy_is_never_a_childs_file(tmp_path: Path) -> None:
    table = {
        "providers": {
            "vault": {
                "type": "vault",
                "addr": "http://127.0.0.1:8200",
                "token_file": "t",
                "proxy_hosts": ["vault.ci.internal:8200"],
            },
        },
    }
    config = parse_config(table, tmp_path / "broker.toml")
    proxied = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 5, "inject": "proxy"}
    network = {"allow": ["vault.ci.internal:8200"]}
    record, parent, held = _parent(config, credentials=[proxied], network=network)
    as_file = {"name": "kv", "provider": "vault", "policies": ["ci-read"], "num_uses": 1}
    reasons, _ = cover(config, record, parent, held, _manifest(config, [as_file], ttl="20m"), NOW)
    assert _keys(reasons) == ["credentials[0].inject"] and "never enters the sandbox" in reasons[0]
    also_proxied = {**as_file, "inject": "proxy"}
    reasons, _ = cover(config, record, parent, held, _manifest(config, [also_proxied], ttl="20m", network=network), NOW)
    assert _keys(reasons) == ["credentials[0].inject"]


def test_an_aws_credential_kept_in_the_parents_proxy_never_becomes_a_childs_file(config: Config) -> None:
    """The parent's sandbox has its placeholders, never its STS keys: no child's file covered by it, by any name."""
    network = {"allow": ["sts.us-east-1.amazonaws.com:443", "s3.us-east-1.amazonaws.com:443"]}
    proxied = {**PARENT_CREDENTIALS[1], "inject": "proxy"}
    record, parent, held = _parent(config, credentials=[proxied], network=network)
    for asked in ([_aws()], [_aws(name="other")]):  # its name, and another any parent aws credential could cover
        reasons, decision = cover(config, record, parent, held, _manifest(config, asked, ttl="20m"), NOW)
        assert decision is None and _keys(reasons) == ["credentials[0].inject"] and "artifacts never" in reasons[0]
    child = _manifest(config, [_aws(inject="proxy")], ttl="20m", network=network)
    reasons, decision = cover(config, record, parent, held, child, NOW)
    assert decision is None and _keys(reasons) == ["credentials[0].inject"] and "are files" in reasons[0]
    both = [proxied, {**PARENT_CREDENTIALS[1], "name": "logs"}]
    record, parent, held = _parent(config, credentials=both, network=network)
    reasons, decision = cover(config, record, parent, held, _manifest(config, [_aws(name="other")], ttl="20m"), NOW)
    assert reasons == [] and decision is not None and decision.credential("other").ttl is not None
    reasons, _ = cover(config, record, parent, held, _manifest(config, [_aws()], ttl="20m"), NOW)
    assert _keys(reasons) == ["credentials[0].inject"]


def test_a_child_names_no_mount_path_of_its_own(config: Config) -> None:
    from broker.core.broker import Broker
    from broker.core.delegation.delegating import child_manifest
    from broker.vocab.errors import BadInput

    record, _, _ = _parent(config)
    body = json.dumps({"version": 1, "task": "fix-1", "sandbox": {"mount_path": "/srv/x"}, "credentials": [GITHUB]})
    broker = Broker.__new__(Broker)
    broker.config = config
    with pytest.raises(BadInput, match="sandbox.mount_path: a child's files are in its parent's directory"):
        child_manifest(broker, record, body.encode())


def test_a_session_holds_a_bounded_number_of_live_children(config: Config, tmp_path: Path) -> None:
    import dataclasses

    from broker.core.broker import Broker, Requester
    from broker.core.delegation.delegating import MAX_LIVE_CHILDREN, parent_session
    from broker.core.store import open_store
    from broker.vocab.errors import PolicyDenied

    store = open_store(tmp_path)
    broker = Broker.__new__(Broker)
    broker.config, broker.store, broker.requester = config, store, Requester("ci", 1000)
    broker.clock = lambda: NOW
    try:
        record, _, _ = _parent(config)
        store.create_session(record)
        for index in range(MAX_LIVE_CHILDREN):
            child = dataclasses.replace(record, id=f"s-child{index:07d}", parent=record.id, delegate_depth=0)
            store.create_session(child)
            if index == MAX_LIVE_CHILDREN - 2:
                assert parent_session(broker, record.id) == store.get_session(record.id)
        with pytest.raises(PolicyDenied, match="holds 64 live children already"):
            parent_session(broker, record.id)
        store.set_session_state("s-child0000000", SessionState.REVOKED)
        assert parent_session(broker, record.id).id == record.id
    finally:
        store.close()
