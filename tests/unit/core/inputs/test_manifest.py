"""Manifest loading: strict YAML/JSON, every field checked, the offending field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.core.inputs.config import Config, parse_config
from broker.core.inputs.manifest import parse_manifest
from broker.vocab.errors import ManifestError
from providers.vault.request import VaultRequest

GOOD = """\
version: 1
task: fix-build-123
ttl: 30m
sandbox:
  uid: 1000
  gid: 1000
  mount_path: /run/secrets
credentials:
  - name: kv
    provider: vault
    policies: [ci-read]
    ttl: 10m
    num_uses: 0
"""


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    root = tmp_path_factory.mktemp("config")
    table = {"providers": {"vault": {"type": "vault", "addr": "http://127.0.0.1:8200", "token_file": "t"}}}
    return parse_config(table, root / "broker.toml")


def test_a_good_manifest_parses(config: Config) -> None:
    manifest = parse_manifest(GOOD.encode(), config)
    assert manifest.task == "fix-build-123"
    assert manifest.ttl == 1800
    assert (manifest.sandbox.uid, manifest.sandbox.gid, str(manifest.sandbox.mount_path)) == (
        1000,
        1000,
        "/run/secrets",
    )
    assert manifest.credentials == (
        VaultRequest(name="kv", provider="vault", ttl=600, policies=("ci-read",), num_uses=0),
    )


def test_json_manifests_parse_the_same(config: Config) -> None:
    import yaml

    document = yaml.safe_load(GOOD)
    assert parse_manifest(json.dumps(document).encode(), config, as_json=True) == parse_manifest(GOOD.encode(), config)


def test_sandbox_defaults_to_the_caller(config: Config) -> None:
    import os

    manifest = parse_manifest(b"version: 1\ntask: t\ncredentials: [{name: a, provider: vault, policies: [p]}]", config)
    assert (manifest.sandbox.uid, manifest.sandbox.gid) == (os.getuid(), os.getgid())
    assert str(manifest.sandbox.mount_path) == "/run/secrets"


def edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


HOSTILE: dict[str, tuple[str | bytes, str]] = {
    # name: (manifest text, fragment the one-line error must contain)
    "traversal-in-credential-name": (edit("name: kv", "name: ../../etc"), "credentials[0].name"),
    "absolute-credential-name": (edit("name: kv", "name: /etc/passwd"), "credentials[0].name"),
    "dot-credential-name": (edit("name: kv", "name: '..'"), "credentials[0].name"),
    "slash-in-task": (edit("task: fix-build-123", "task: fix/../../x"), "task"),
    "upper-case-task": (edit("task: fix-build-123", "task: FIX-build"), "task"),
    "nul-in-task": (edit("task: fix-build-123", 'task: "fix\\0build"'), "task"),
    "newline-in-task": (edit("task: fix-build-123", 'task: "fix\\nbuild"'), "task"),
    "confusable-task": (edit("task: fix-build-123", "task: fix-bui\u217cd"), "task"),
    "duplicate-key": (edit("ttl: 30m", "ttl: 30m\nttl: 1h"), "duplicate key 'ttl'"),
    "duplicate-credential-name": (
        GOOD + "  - name: kv\n    provider: vault\n    policies: [ci-read]\n",
        "credentials[1].name",
    ),
    "yaml-tag": (edit("task: fix-build-123", "task: !!python/name:os.system x"), "tags are not allowed"),
    "yaml-anchor-alias": (edit("ttl: 30m", "ttl: &t 30m\nx: *t"), "anchors are not allowed"),
    "yaml-merge-key": (edit("  uid: 1000", "  <<: {uid: 0}\n  uid: 1000"), "merge keys"),
    "billion-laughs": (
        'a: &a ["lol","lol"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n',
        "anchors are not allowed",
    ),
    "oversize": (GOOD + "#" + "x" * 70000 + "\n", "larger than 64 KiB"),
    "unknown-top-level-key": (GOOD + "run_as_root: true\n", "run_as_root: unknown key"),
    "unknown-credential-key": (
        edit("    num_uses: 0", "    num_uses: 0\n    period: 1h"),
        "credentials[0].period: unknown key",
    ),
    "unknown-sandbox-key": (
        edit("  gid: 1000", "  gid: 1000\n  privileged: true"),
        "sandbox.privileged: unknown key",
    ),
    "ttl-wrong-type": (edit("ttl: 30m", "ttl: [30m]"), "ttl: expected a duration"),
    "ttl-negative": (edit("ttl: 30m", "ttl: -5m"), "ttl:"),
    "ttl-zero": (edit("ttl: 30m", "ttl: 0"), "ttl: a duration must be positive"),
    "ttl-unknown-unit": (edit("ttl: 30m", "ttl: 2d"), "ttl: '2d' is not a duration"),
    "ttl-overflow": (edit("ttl: 30m", "ttl: 99999999999999999999999h"), "ttl:"),
    "ttl-float": (edit("ttl: 30m", "ttl: 1.5"), "ttl: expected a duration"),
    "ttl-bool": (edit("ttl: 30m", "ttl: yes"), "ttl: expected a duration"),
    "credential-ttl-beyond-session": (
        edit("    ttl: 10m", "    ttl: 2h"),
        "credentials[0].ttl: longer than the session",
    ),
    "version-2": (edit("version: 1", "version: 2"), "version: only version 1"),
    "version-missing": (GOOD.replace("version: 1\n", ""), "version: required"),
    "no-credentials": (
        GOOD.split("credentials:")[0] + "credentials: []\n",
        "credentials: needs at least 1 item",
    ),
    "credentials-not-list": (
        GOOD.split("credentials:")[0] + "credentials: {a: 1}\n",
        "credentials: expected a list",
    ),
    "unknown-provider": (
        edit("provider: vault", "provider: prod-vault"),
        "credentials[0].provider: unknown provider",
    ),
    "policies-not-list": (
        edit("policies: [ci-read]", "policies: ci-read"),
        "credentials[0].policies: expected a list",
    ),
    "policies-empty": (
        edit("policies: [ci-read]", "policies: []"),
        "credentials[0].policies: needs at least 1",
    ),
    "root-policy": (edit("policies: [ci-read]", "policies: [root]"), "root policy is never issued"),
    "policy-name-injection": (
        edit("policies: [ci-read]", 'policies: ["ci-read,root"]'),
        "credentials[0].policies[0]",
    ),
    "num-uses-negative": (edit("num_uses: 0", "num_uses: -1"), "credentials[0].num_uses: must be at least 0"),
    "num-uses-huge": (
        edit("num_uses: 0", "num_uses: 99999999999"),
        "credentials[0].num_uses: must be at most",
    ),
    "uid-negative": (edit("uid: 1000", "uid: -1"), "sandbox.uid: must be at least 0"),
    "uid-string": (edit("uid: 1000", "uid: root"), "sandbox.uid: expected an integer"),
    "mount-path-relative": (
        edit("mount_path: /run/secrets", "mount_path: run/secrets"),
        "sandbox.mount_path",
    ),
    "mount-path-traversal": (
        edit("mount_path: /run/secrets", "mount_path: /run/../etc"),
        "sandbox.mount_path",
    ),
    "mount-path-root": (edit("mount_path: /run/secrets", "mount_path: /"), "sandbox.mount_path"),
    "mount-path-etc": (edit("mount_path: /run/secrets", "mount_path: /etc"), "would cover a system directory"),
    "mount-path-proc": (edit("mount_path: /run/secrets", "mount_path: /proc/self"), "would cover a system directory"),
    "mount-path-broker": (edit("mount_path: /run/secrets", "mount_path: /run/broker"), "reaches the broker"),
    "mount-path-in-broker": (edit("mount_path: /run/secrets", "mount_path: /run/broker/x"), "reaches the broker"),
    "root-policy-upper-case": (edit("policies: [ci-read]", "policies: [ROOT]"), "root policy is never issued"),
    "not-a-mapping": ("- just\n- a list\n", "expected a mapping"),
    "not-utf8": (b"version: 1\ntask: \xff\xfe\n", "not valid UTF-8"),
    "invalid-yaml": ("version: 1\ntask: [unclosed\n", "not valid YAML"),
    "deep-nesting": ("a: " + "[" * 200 + "]" * 200 + "\n", "nesting deeper"),
    "integer-key": (GOOD + "1: 2\n", "keys must be strings"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_manifests_are_refused_naming_the_field(config: Config, name: str) -> None:
    text, fragment = HOSTILE[name]
    data = text if isinstance(text, bytes) else text.encode()
    with pytest.raises(ManifestError) as caught:
        parse_manifest(data, config)
    message = caught.value.message
    assert fragment in message, message
    assert "\n" not in message and len(message) < 400


def test_hostile_json_is_refused(config: Config) -> None:
    with pytest.raises(ManifestError, match="duplicate key 'task'"):
        parse_manifest(b'{"version": 1, "task": "a", "task": "b"}', config, as_json=True)
    with pytest.raises(ManifestError, match="NaN is not allowed"):
        parse_manifest(b'{"version": NaN}', config, as_json=True)


def test_cli_reports_a_bad_manifest_in_one_line_with_exit_2(tmp_path: Path) -> None:
    from tests.fixtures.brokerenv import make_env

    env = make_env(tmp_path)
    env.add_provider("vault", {"type": "vault", "addr": "http://127.0.0.1:1", "token_file": "t"})
    task = env.write_task(edit("name: kv", "name: ../x"))
    for command in (("issue", "--task", str(task)), ("policy", "check", "--task", str(task))):
        result = env.run(*command)
        assert result.code == 2
        assert result.stderr.startswith("broker: error: credentials[0].name:")
        assert result.stderr.count("\n") == 1
    assert env.session_dirs() == [] and not env.log_path.exists()
