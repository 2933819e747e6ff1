"""Config loading: clear one-line errors for missing or malformed configs."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path

import pytest

from broker.core.inputs.config import load_config
from broker.vocab.errors import ConfigError
from broker.vocab.secret import Secret
from providers.base import Provider
from providers.registry import PROVIDER_TYPES, known_types, provider_class

BASE = 'state_dir = "s"\nruntime_dir = "/run/b"\npolicy_dir = "p"\n'


def load(tmp_path: Path, text: str) -> object:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return load_config(path)


def test_relative_paths_resolve_against_the_config_directory(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        BASE + '[providers.vault]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\ntoken_file = "tok"\n',
    )
    assert config.state_dir == tmp_path / "s"  # type: ignore[attr-defined]
    assert config.policy_dir == tmp_path / "p"  # type: ignore[attr-defined]
    assert config.default_ttl == 1800 and config.max_ttl == 43200  # type: ignore[attr-defined]
    assert config.providers["vault"].vault.token_file == tmp_path / "tok"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("state_dir = \n", "is not valid TOML"),
        (BASE + "colour = true\n", "colour: unknown key"),
        (BASE + 'max_ttl = "1y"\n', "max_ttl: '1y' is not a duration"),
        (BASE + 'default_ttl = "2h"\nmax_ttl = "1h"\n', "default_ttl: longer than max_ttl"),
        (BASE + '[providers.x]\ntype = "ldap"\n', "providers.x.type: unknown provider type 'ldap' (known: "),
        (BASE + '[providers.x]\naddr = "http://a"\n', "providers.x.type: required"),
        (BASE + '[providers.Vault]\ntype = "vault"\n', "instance names are lower-case"),
        (
            BASE + '[providers.v]\ntype = "vault"\naddr = "http://127.0.0.1:8200"\n',
            "set token_file, or approle",
        ),
        (BASE + '[providers.v]\ntype = "vault"\naddr = "ftp://x"\ntoken_file = "t"\n', "providers.v.addr"),
        (
            BASE + '[providers.v]\ntype = "vault"\naddr = "https://a:1"\ntoken_file = "t"\ntoken = "s.x"\n',
            "providers.v.token: unknown key",
        ),
        (BASE + 'mount_tmpfs = "sometimes"\n', "mount_tmpfs: must be one of"),
        ("runtime_dir = 5\n", "runtime_dir: expected a string, got an integer"),
    ],
)
def test_malformed_configs_fail_with_one_line(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert fragment in caught.value.message
    assert "\n" not in caught.value.message


def vault_config(addr: str) -> str:
    return BASE + f'[providers.v]\ntype = "vault"\naddr = "{addr}"\ntoken_file = "t"\n'


@pytest.mark.parametrize(
    "addr",
    [
        "http://vault.example.com:8200",
        "http://10.0.0.7:8200",
        "http://128.0.0.1:8200",
        "http://[::2]:8200",
        "http://localhost.example.com:8200",
        "http://127.0.0.1.nip.io:8200",
    ],
)
def test_vault_addr_must_be_https_unless_loopback(
    tmp_path: Path, addr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A token sent over plain http to a remote Vault can be read on the way; the config is refused (exit 2)."""
    from broker.cli.app import main

    path = tmp_path / "broker.toml"
    path.write_text(vault_config(addr))
    assert main(["--config", str(path), "status"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("broker: error: ") and captured.err.count("\n") == 1
    assert "providers.v.addr: must use https:// (plain http only for 127.0.0.0/8, ::1 or localhost)" in captured.err


@pytest.mark.parametrize(
    "addr",
    [
        "https://vault.example.com:8200",
        "https://10.0.0.7",
        "http://127.0.0.1:8200",
        "http://127.200.3.4:8200",
        "http://[::1]:8200",
        "http://localhost:8200",
        "http://LocalHost",
    ],
)
def test_vault_addr_accepts_https_and_loopback_http(tmp_path: Path, addr: str) -> None:
    config = load(tmp_path, vault_config(addr))
    assert config.providers["v"].vault.addr == addr.rstrip("/")  # type: ignore[attr-defined]


def test_missing_config_names_the_ways_to_set_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found \\(use --config or BROKER_CONFIG\\)"):
        load_config(tmp_path / "nope.toml")


def test_cli_uses_broker_config_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.cli.app import main

    monkeypatch.setenv("BROKER_CONFIG", str(tmp_path / "missing.toml"))
    assert main(["status"]) == 2


def test_every_registered_provider_type_implements_the_interface() -> None:
    assert known_types() == sorted(PROVIDER_TYPES)
    for type_name in known_types():
        cls = provider_class(type_name)
        assert issubclass(cls, Provider)
        assert cls.type_name == type_name
        assert not getattr(cls, "__abstractmethods__", None), type_name
        sdk = getattr(cls, "sdk", None)  # a Warming provider's: imported by the core before its worker threads start
        for module in sdk.modules if sdk is not None else ():
            importlib.import_module(module)


def test_secret_is_redacted_everywhere() -> None:
    canary = Secret("canary-3f9a1c")
    for text in (
        repr(canary),
        str(canary),
        f"{canary}",
        f"{canary!r}",
        "{}".format(canary),  # noqa: UP032
        str([canary]),
        str({"k": canary}),
    ):
        assert "canary" not in text
    with pytest.raises(TypeError):
        pickle.dumps(canary)
    with pytest.raises(AttributeError):
        canary._value = b"x"
    assert canary.reveal() == "canary-3f9a1c"
    assert canary == Secret(b"canary-3f9a1c")
    assert canary.fingerprint(Secret("k")).startswith("hmac-sha256:")
