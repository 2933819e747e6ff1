"""Property-based tests of the three loaders of untrusted or operator input.

Whatever bytes arrive, the manifest, policy and config loaders return a valid
object or raise a ``BadInput`` whose message is one printable line of fewer
than 500 characters: never another exception (no ``KeyError``, no
``RecursionError``, no ``MemoryError``). Inputs come from four sources
(``strategies.py``): random bytes, YAML-ish text built from a grammar of
plausible manifest fragments, structural mutations of a valid manifest or
policy, and byte mutations of valid documents.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import event, given
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from broker.core.inputs.config import Config, load_config, parse_config
from broker.core.inputs.manifest import CREDENTIAL_NAME, TASK_NAME, Manifest, parse_manifest
from broker.core.inputs.policy import load_policy_file
from broker.vocab.errors import BadInput
from tests.fixtures.stack import STACK_POLICY, STACK_TASK
from tests.security.inputs.strategies import LOADER, byte_mutated, mutated, providers_table, yamlish

T = TypeVar("T")

CONFIG_TOML = """\
state_dir = "state"
runtime_dir = "/run/broker-props"
policy_dir = "policies"
audit_key = "audit.key"
default_ttl = "30m"
max_ttl = "12h"

[providers.vault]
type = "vault"
addr = "http://127.0.0.1:8200"
token_file = "vault-token"
token_role = "broker-session"

[providers.aws]
type = "aws_sts"
region = "us-east-1"
endpoint_url = "http://127.0.0.1:5000"
revoke = "deny-policy"

[providers.github]
type = "github_app"
app_id = "123456"
private_key_file = "github-app.pem"
api_url = "https://api.github.com"
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("properties")


@pytest.fixture(scope="module")
def config(workdir: Path) -> Config:
    return parse_config({"providers": providers_table("http://127.0.0.1:8200")}, workdir / "broker.toml")


# -- the property ------------------------------------------------------------------------


def refused_cleanly(call: Callable[[], T]) -> T | None:
    """``call()``'s value, or None when it raised a well-formed ``BadInput``; anything else propagates."""
    try:
        value = call()
    except BadInput as exc:
        message = exc.message
        with contextlib.suppress(InvalidArgument):  # outside a hypothesis test there is nothing to record
            event(f"refused: {type(exc).__name__}")
        assert message == str(exc)
        assert message, "an empty error message"
        assert "\n" not in message and "\r" not in message, message
        assert len(message) < 500, f"{len(message)} characters: {message[:200]}..."
        assert message.isprintable(), f"control or format characters in {message!r}"
        return None
    with contextlib.suppress(InvalidArgument):
        event("valid")
    return value


def check_manifest(data: bytes, config: Config, as_json: bool) -> None:
    manifest = refused_cleanly(lambda: parse_manifest(data, config, as_json=as_json))
    if manifest is None:
        return
    assert isinstance(manifest, Manifest)
    assert TASK_NAME.fullmatch(manifest.task)
    names = [c.name for c in manifest.credentials]
    assert len(set(names)) == len(names) >= 1
    assert all(CREDENTIAL_NAME.fullmatch(n) for n in names)
    assert all(c.provider in config.providers for c in manifest.credentials)
    assert manifest.ttl is None or 0 < manifest.ttl <= 7 * 24 * 3600
    assert ".." not in manifest.sandbox.mount_path.parts and manifest.sandbox.mount_path.is_absolute()


# -- the manifest loader --------------------------------------------------------------------


@LOADER
@given(data=st.binary(max_size=2048), as_json=st.booleans())
def test_manifest_loader_on_random_bytes(config: Config, data: bytes, as_json: bool) -> None:
    check_manifest(data, config, as_json)


@LOADER
@given(data=yamlish())
def test_manifest_loader_on_yamlish_text_from_a_grammar(config: Config, data: bytes) -> None:
    check_manifest(data, config, False)


@LOADER
@given(case=mutated(STACK_TASK))
def test_manifest_loader_on_mutations_of_a_valid_manifest(config: Config, case: tuple[bytes, bool]) -> None:
    check_manifest(case[0], config, case[1])


@LOADER
@given(data=byte_mutated(STACK_TASK), as_json=st.booleans())
def test_manifest_loader_on_byte_mutations_of_a_valid_manifest(config: Config, data: bytes, as_json: bool) -> None:
    check_manifest(data, config, as_json)


def test_the_unmutated_documents_are_valid(config: Config, workdir: Path) -> None:
    """The mutation bases parse, so the mutations above start from valid documents."""
    assert parse_manifest(STACK_TASK.encode(), config).task == "fix-build-123"
    path = workdir / "base-policy.yaml"
    path.write_text(STACK_POLICY)
    assert [r.id for r in load_policy_file(path, config)] == ["agents-widgets"]
    path = workdir / "base-config.toml"
    path.write_text(CONFIG_TOML)
    assert sorted(load_config(path).providers) == ["aws", "github", "vault"]


# -- the policy and config loaders ------------------------------------------------------------


@LOADER
@given(data=st.one_of(st.binary(max_size=2048), byte_mutated(STACK_POLICY), mutated(STACK_POLICY).map(lambda c: c[0])))
def test_policy_loader_on_random_and_mutated_bytes(config: Config, workdir: Path, data: bytes) -> None:
    path = workdir / "policies" / "p.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    rules = refused_cleanly(lambda: load_policy_file(path, config))
    if rules is not None:
        assert all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", r.id) for r in rules)


@LOADER
@given(data=st.one_of(st.binary(max_size=2048), byte_mutated(CONFIG_TOML)))
def test_config_loader_on_random_and_mutated_bytes(workdir: Path, data: bytes) -> None:
    path = workdir / "config" / "broker.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    loaded = refused_cleanly(lambda: load_config(path))
    if loaded is not None:
        assert 0 < loaded.default_ttl <= loaded.max_ttl
        assert set(loaded.providers) <= {"vault", "aws", "github"} or all(loaded.providers)


@pytest.mark.parametrize("text", ["a = " + "[" * 5000 + "]" * 5000, "a = " + "9" * 5000], ids=["deep", "huge-int"])
def test_config_loader_refuses_pathological_toml(workdir: Path, text: str) -> None:
    path = workdir / "pathological.toml"
    path.write_text(text)
    refused_cleanly(lambda: load_config(path))
