"""Policy files: strict loading and compilation, deny by default, globs, TTL capping."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from broker.core.broker import Requester
from broker.core.inputs.config import Config, parse_config
from broker.core.inputs.manifest import parse_manifest
from broker.core.inputs.policy import Decision, decide, load_policy
from broker.vocab.errors import PolicyFileError

CI = Requester(name="ci", uid=1001)


def make_config(tmp_path: Path, max_ttl: str = "12h", default_ttl: str = "30m") -> Config:
    table = {
        "policy_dir": str(tmp_path / "policies"),
        "max_ttl": max_ttl,
        "default_ttl": default_ttl,
        "providers": {
            "vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"},
            "vault2": {"type": "vault", "addr": "http://127.0.0.1:8201", "token_file": "t"},
        },
    }
    return parse_config(table, tmp_path / "broker.toml")


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> None:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(textwrap.dedent(text))


POLICY = """
rules:
  - id: agents
    tasks: ["fix-*", "review-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    requesters: ["ci", "uid:1000"]
    max_ttl: 1h
    grants:
      - provider: vault
        policies: ["ci-read", "team-*"]
        max_ttl: 30m
        max_uses: 100
"""


def decision(tmp_path: Path, manifest: str, requester: Requester = CI, policy: str = POLICY, **kw: str) -> Decision:
    config = make_config(tmp_path, **kw)
    write(tmp_path, policy)
    return decide(
        load_policy(config.policy_dir, config),
        parse_manifest(textwrap.dedent(manifest).encode(), config),
        requester,
        config,
    )


def manifest(task: str = "fix-1", ttl: str = "2h", policies: str = "[ci-read]", extra: str = "num_uses: 10") -> str:
    return f"""
    version: 1
    task: {task}
    ttl: {ttl}
    sandbox: {{uid: 1000, gid: 1000}}
    credentials:
      - {{name: kv, provider: vault, policies: {policies}, {extra}}}
    """


def test_allowed_request_names_its_rule_and_caps_ttls(tmp_path: Path) -> None:
    result = decision(tmp_path, manifest())
    assert result.allowed
    assert result.session_ttl == 3600  # 2h asked, rule max_ttl 1h
    [credential] = result.credentials
    assert (credential.rule, credential.ttl) == ("agents", 1800)  # grant max_ttl 30m


def test_config_max_ttl_caps_everything(tmp_path: Path) -> None:
    result = decision(tmp_path, manifest(), max_ttl="20m", default_ttl="20m")
    assert result.session_ttl == 1200 and result.credentials[0].ttl == 1200


def test_credential_ttl_never_exceeds_session_ttl(tmp_path: Path) -> None:
    result = decision(tmp_path, manifest(ttl="5m"))
    assert result.session_ttl == 300 and result.credentials[0].ttl == 300


def test_default_ttl_applies_when_the_manifest_has_none(tmp_path: Path) -> None:
    text = manifest().replace("    ttl: 2h\n", "")
    assert decision(tmp_path, text).session_ttl == 1800


@pytest.mark.parametrize(
    ("text", "requester", "reason"),
    [
        (manifest(task="deploy-1"), CI, "no rule matches task 'deploy-1' and requester 'ci'"),
        (manifest(), Requester("mallory", 1234), "no rule matches task 'fix-1' and requester 'mallory'"),
        (manifest(policies="[ci-read, prod-admin]"), CI, "vault policy 'prod-admin' is not granted"),
        (manifest(policies="[team]"), CI, "vault policy 'team' is not granted"),
        (manifest(extra="num_uses: 0"), CI, "num_uses 0 (unlimited) is above the grant's max_uses 100"),
        (manifest(extra="num_uses: 101"), CI, "num_uses 101 is above the grant's max_uses 100"),
        (
            manifest(task="fix-1").replace("provider: vault", "provider: vault2"),
            CI,
            "no grant for provider 'vault2'",
        ),
    ],
)
def test_denials_name_what_fell_outside(tmp_path: Path, text: str, requester: Requester, reason: str) -> None:
    result = decision(tmp_path, text, requester)
    assert not result.allowed
    assert any(reason in r for r in result.reasons), result.reasons


def test_requester_by_uid(tmp_path: Path) -> None:
    assert decision(tmp_path, manifest(), Requester("someone", 1000)).allowed


def test_task_globs_do_not_cross_separators_or_case(tmp_path: Path) -> None:
    assert not decision(tmp_path, manifest(task="fix")).allowed  # "fix-*" needs the dash
    assert not decision(tmp_path, manifest(task="prefix-1")).allowed  # anchored


def test_a_later_rule_can_cover_what_an_earlier_one_does_not(tmp_path: Path) -> None:
    policy = (
        POLICY
        + """
  - id: prod-readers
    tasks: ["fix-*"]
    sandbox_uids: ["0-65534"]
    sandbox_gids: ["0-65534"]
    grants:
      - {provider: vault, policies: ["prod-*"], max_uses: 5}
"""
    )
    result = decision(tmp_path, manifest(policies="[prod-read]", extra="num_uses: 3"), policy=policy)
    assert result.allowed and result.credentials[0].rule == "prod-readers"


BAD_POLICIES = {
    "unknown key": (
        "rules:\n  - id: a\n    tasks: ['*']\n    grants: [{provider: vault, policies: ['*']}]\n    allow_all: true\n",
        "rules[0].allow_all: unknown key",
    ),
    "unknown provider": (
        "rules:\n  - id: a\n    tasks: ['*']\n    grants: [{provider: aws, roles: ['*']}]\n",
        "rules[0].grants[0].provider: 'aws' is not a provider in the config",
    ),
    "unknown grant key": (
        "rules:\n  - id: a\n    tasks: ['*']\n    grants: [{provider: vault, policies: ['*'], roles: [x]}]\n",
        "rules[0].grants[0].roles: unknown key",
    ),
    "no grants": (
        "rules:\n  - id: a\n    tasks: ['*']\n    grants: []\n",
        "rules[0].grants: needs at least 1",
    ),
    "no tasks": (
        "rules:\n  - id: a\n    grants: [{provider: vault, policies: ['*']}]\n",
        "rules[0].tasks: required",
    ),
    "bad ttl": (
        "rules:\n  - id: a\n    tasks: ['*']\n    max_ttl: forever\n    grants: [{provider: vault, policies: ['*']}]\n",
        "rules[0].max_ttl",
    ),
    "bad task glob": (
        "rules:\n  - id: a\n    tasks: ['fix/[a-z]']\n    grants: [{provider: vault, policies: ['*']}]\n",
        "rules[0].tasks[0]",
    ),
    "not yaml": ("rules: [\n", "not valid YAML"),
    "alias": ("x: &a 1\nrules: *a\n", "anchors are not allowed"),
    "max_uses zero": (
        "rules:\n  - id: a\n    tasks: ['*']\n    grants: [{provider: vault, policies: ['*'], max_uses: 0}]\n",
        "max_uses: must be at least 1",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_POLICIES))
def test_bad_policy_files_are_refused_naming_file_and_field(tmp_path: Path, name: str) -> None:
    text, fragment = BAD_POLICIES[name]
    config = make_config(tmp_path)
    write(tmp_path, text, name="team.yaml")
    with pytest.raises(PolicyFileError) as caught:
        load_policy(config.policy_dir, config)
    assert caught.value.message.startswith("team.yaml: ")
    assert fragment in caught.value.message


def test_duplicate_rule_ids_across_files_are_refused(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write(tmp_path, POLICY, "a.yaml")
    write(tmp_path, POLICY, "b.yaml")
    with pytest.raises(PolicyFileError, match="rule id 'agents' is also defined in a.yaml"):
        load_policy(config.policy_dir, config)


def test_an_empty_rule_set_is_refused(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    (tmp_path / "policies").mkdir()
    with pytest.raises(PolicyFileError, match="no policy rules"):
        load_policy(config.policy_dir, config)


def test_policy_lint_and_check_commands(tmp_path: Path) -> None:
    from tests.fixtures.brokerenv import make_env

    env = make_env(tmp_path)
    env.add_provider("vault", {"type": "vault", "addr": "http://127.0.0.1:1", "token_file": "t"})
    lint = env.run("policy", "lint")
    assert (lint.code, lint.stdout.strip()) == (0, "ok: 1 rules in 1 files")
    task = env.write_task(manifest(policies="[ci-read, secret-admin]", extra="num_uses: 1"))
    check = env.run("policy", "check", "--task", str(task), "--json")
    assert check.code == 3
    [credential] = check.json()["credentials"]
    assert credential["allowed"] is False
    assert credential["reasons"] == ["rule agents: vault policy 'secret-admin' is not granted"]
    human = env.run("policy", "check", "--task", str(task))
    assert "kv: denied" in human.stdout and "secret-admin" in human.stderr
    allowed = env.run("policy", "check", "--task", str(env.write_task(manifest(extra="num_uses: 1"))))
    assert allowed.code == 0 and "kv: allowed by rule agents, ttl 30m" in allowed.stdout
    (env.policy_dir / "bad.yaml").write_text("rules:\n  - id: x\n    tasks: ['*']\n    grants: [{provider: github}]\n")
    broken = env.run("policy", "lint")
    assert broken.code == 2 and "bad.yaml: rules[0].grants[0].provider" in broken.stderr
    (env.policy_dir / "bad.yaml").write_text(
        "rules:\n  - id: x\n    tasks: ['*']\n    grants: [{provider: vault, policies: [ci-read]}]\n"
    )
    idle = env.run("policy", "lint")
    assert idle.code == 2
    assert idle.stderr == (
        "broker: error: rule x lists no sandbox_uids/sandbox_gids and allows no session:"
        " add the uids and gids the sandbox may run as\n"
    )
    assert not env.state_dir.exists()  # check and lint write nothing


def test_the_shipped_policy_files_lint(tmp_path: Path) -> None:
    shipped = Path(__file__).resolve().parents[4] / "policies"
    table = {
        "policy_dir": str(shipped),
        "providers": {
            "vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"},
            "aws": {"type": "aws_sts", "region": "us-east-1"},
            "github": {"type": "github_app", "app_id": "1", "private_key_file": "k.pem"},
            "modelx": {
                "type": "token_exchange",
                "token_endpoint": "https://auth.model.example/oauth/token",
                "audience": "https://api.model.example",
            },
        },
        "identity": {"issuer": "https://broker.example.com"},
    }
    config = parse_config(table, tmp_path / "broker.toml")
    policy = load_policy(shipped, config)
    assert [r.id for r in policy.rules] == ["ci-read-only", "agents-widgets", "nightly-docs", "deploy-production"]


def test_a_root_sandbox_needs_a_rule_that_allows_it(tmp_path: Path) -> None:
    as_root = manifest().replace("sandbox: {uid: 1000, gid: 1000}", "sandbox: {uid: 0, gid: 0}")
    denied = decision(tmp_path, as_root)
    assert not denied.allowed
    assert denied.reasons == ("kv: sandbox uid/gid 0 (root) needs a rule with allow_root_sandbox: true",)
    allowing = POLICY.replace("    max_ttl: 1h\n", "    max_ttl: 1h\n    allow_root_sandbox: true\n", 1)
    assert decision(tmp_path, as_root, policy=allowing).allowed


def test_a_long_denial_stays_one_bounded_line(tmp_path: Path) -> None:
    many = "[" + ", ".join(f"prod-{i:03d}" for i in range(60)) + "]"
    result = decision(tmp_path, manifest(policies=many))
    message = result.denial_message()
    assert len(message) < 1200 and "\n" not in message
    assert message.endswith("more (broker policy check --task ... lists them all)")
    assert "vault policy 'prod-000' is not granted" in message


def _delegating(rate: str = "", total: str = "", rule: str = "agents") -> str:
    keys = "    delegate: true\n" + (f"    delegate_rate: {rate}\n" if rate else "")
    keys += f"    delegate_total: {total}\n" if total else ""
    return POLICY.replace("  - id: agents\n", f"  - id: {rule}\n").replace(
        "    max_ttl: 1h\n", "    max_ttl: 1h\n" + keys
    )


def test_a_delegating_rule_allows_ten_children_a_minute_and_256_in_all_unless_it_says_otherwise(
    tmp_path: Path,
) -> None:
    result = decision(tmp_path, manifest(), policy=_delegating())
    assert (result.delegation.depth, result.delegation.rate, result.delegation.total) == (1, 10, 256)
    assert result.to_json()["delegate_rate"] == 10 and result.to_json()["delegate_total"] == 256
    result = decision(tmp_path, manifest(), policy=_delegating(rate="3", total="40"))
    assert (result.delegation.rate, result.delegation.total) == (3, 40)


def test_a_session_drawing_on_several_delegating_rules_gets_the_smallest_rate_and_total(tmp_path: Path) -> None:
    # the kv credential from one rule, kv2 from the other: the session draws on both
    other = _delegating(rate="2", total="500", rule="second").replace("provider: vault", "provider: vault2")
    policy = _delegating(rate="7", total="30") + other.removeprefix("\nrules:\n")
    text = manifest() + "  - {name: kv2, provider: vault2, policies: [ci-read], num_uses: 1}\n"
    result = decision(tmp_path, text, policy=policy)
    assert result.allowed and {c.rule for c in result.credentials} == {"agents", "second"}
    assert (result.delegation.rate, result.delegation.total) == (2, 30)
    assert "delegate_rate" not in decision(tmp_path, manifest()).to_json()  # no delegate: nothing to say


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ("    delegate_rate: 5\n", "rules[0].delegate_rate: needs delegate: true"),
        ("    delegate_total: 5\n", "rules[0].delegate_total: needs delegate: true"),
        ("    delegate: true\n    delegate_rate: 0\n", "rules[0].delegate_rate: must be at least 1"),
        ("    delegate: true\n    delegate_rate: 601\n", "rules[0].delegate_rate: must be at most 600"),
        ("    delegate: true\n    delegate_total: 0\n", "rules[0].delegate_total: must be at least 1"),
        ("    delegate: true\n    delegate_total: 10m\n", "rules[0].delegate_total: expected an integer"),
    ],
)
def test_delegation_limits_are_parsed_strictly(tmp_path: Path, keys: str, message: str) -> None:
    config = make_config(tmp_path)
    write(tmp_path, POLICY.replace("    max_ttl: 1h\n", "    max_ttl: 1h\n" + keys))
    with pytest.raises(PolicyFileError) as caught:
        load_policy(config.policy_dir, config)
    assert message in caught.value.message


TWO_NETWORKS = """
rules:
  - id: plain
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["a.example:443"]
    grants:
      - {provider: vault, policies: ["ci-*"], max_uses: 100}
  - id: limited
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: ["a.example:443", "b.example:443"]
    operations:
      http:
        "b.example:443": {methods: [GET]}
    grants:
      - {provider: vault, policies: ["ci-*"], max_uses: 100}
"""


def test_a_network_rule_named_is_the_only_one_that_may_allow_the_destinations(tmp_path: Path) -> None:
    config = make_config(tmp_path)
    write(tmp_path, TWO_NETWORKS)
    policy = load_policy(config.policy_dir, config)
    wider = textwrap.dedent(manifest()) + 'network: {allow: ["a.example:443", "b.example:443"]}\n'
    parsed = parse_manifest(wider.encode(), config)
    first = decide(policy, parsed, CI, config)
    assert first.allowed and first.network.rule == "limited"  # any rule: the first that covers both
    held = decide(policy, parsed, CI, config, network_rule="plain")
    assert not held.allowed and held.network.reasons == ("rule plain: b.example:443 is not in its network",)
    own = decide(policy, parsed, CI, config, network_rule="limited")
    assert own.allowed and own.network.rule == "limited" and not own.operations.empty
    gone = decide(policy, parsed, CI, config, network_rule="removed")
    assert not gone.allowed and gone.network.reasons == ("rule removed does not apply to it now",)
