"""``broker init`` and ``broker doctor``: a fresh installation, its modes, and health checks against the stack."""

from __future__ import annotations

import email.utils
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from broker.audit.keys import load_fingerprint_keys, load_or_create_keys, load_signing_keys
from broker.cli.ops.doctor import FIX_MARK
from broker.core.inputs.config import load_config
from broker.core.setup.install import DEFAULT_POLICY
from broker.vocab.checks import Check
from devstack.github_app import GitHubAppEmulator
from providers.clock import clock_check
from tests.fixtures.aws import REGION, AwsRole
from tests.fixtures.brokerenv import BrokerEnv, Result, toml_value
from tests.fixtures.github import APP_ID, AppKeys, write_key
from tests.fixtures.net import closed_port
from tests.fixtures.openbao import CHILD_ROLE, ROOT_TOKEN, OpenBao, admin_approle, approle_table

REPOSITORY = Path(__file__).resolve().parent.parent
BASE_CHECKS = ["config", "policy", "runtime_dir", "state_dir", "audit_key", "fingerprint_key"]
STACK_CHECKS = [
    *BASE_CHECKS,
    "providers.vault.login",
    "providers.vault.capabilities",
    "providers.vault.entity",
    "providers.vault.clock",
    "providers.aws.identity",
    "providers.aws.clock",
    "providers.github.app",
    "providers.github.installations",
    "providers.github.clock",
]
CANARY_TOKEN = "hvs.doctor-canary-never-printed"


def init_args(tmp_path: Path) -> list[str]:
    return [
        "--dir",
        str(tmp_path / "etc"),
        "--state-dir",
        str(tmp_path / "state"),
        "--runtime-dir",
        str(tmp_path / "run"),
    ]


def new_env(tmp_path: Path) -> BrokerEnv:
    """A BrokerEnv over the directories ``init`` creates (its own write_config is never called)."""
    return BrokerEnv(root=tmp_path / "etc", runtime_dir=tmp_path / "run", settings={"state_dir": tmp_path / "state"})


@pytest.fixture
def installed(tmp_path: Path) -> Iterator[BrokerEnv]:
    env = new_env(tmp_path)
    result = env.run("init", *init_args(tmp_path))
    assert result.code == 0, result.stderr
    try:
        yield env
    finally:
        env.cleanup()


def append_providers(env: BrokerEnv, tables: Mapping[str, Mapping[str, object]]) -> None:
    lines = []
    for name, table in tables.items():
        lines.append(f"\n[providers.{name}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in table.items()]
    with env.config_path.open("a", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")


def enable_default_policy(env: BrokerEnv) -> None:
    """The documented next step once a provider named ``vault`` exists."""
    (env.policy_dir / "default.yaml.example").rename(env.policy_dir / "default.yaml")


def vault_table(env: BrokerEnv, addr: str, token: str = ROOT_TOKEN) -> dict[str, object]:
    token_file = env.write_secret("vault-token", token)
    return {"type": "vault", "addr": addr, "token_file": str(token_file), "token_role": "broker-session"}


def lines_by_name(result: Result) -> dict[str, str]:
    """``name -> line`` of doctor's output; every line is ``✓ name: ...`` or ``✗ name: ...``."""
    found = {}
    for line in result.stdout.splitlines():
        mark, _, rest = line.partition(" ")
        assert mark in ("✓", "✗"), line
        found[rest.split(":", 1)[0]] = line
    return found


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- init --------------------------------------------------------------------------------


def test_init_creates_every_file_and_directory_with_its_mode(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    old_umask = os.umask(0o077)  # the modes must not depend on the umask
    try:
        result = env.run("init", *init_args(tmp_path))
    finally:
        os.umask(old_umask)
    assert result.code == 0, result.stderr
    etc = tmp_path / "etc"
    expected = {
        etc: 0o755,
        etc / "broker.toml": 0o644,
        etc / "policies": 0o755,
        etc / "policies" / "default.yaml.example": 0o644,
        etc / "audit.key": 0o400,
        etc / "fingerprint.key": 0o400,
        tmp_path / "state": 0o700,
        tmp_path / "run": 0o711,
    }
    assert {path: mode(path) for path in expected} == expected
    created = [line.split(" ")[1] for line in result.stdout.splitlines() if line.startswith("created ")]
    assert created == [str(path) for path in expected]
    assert "next steps:" in result.stdout and f"broker --config {etc / 'broker.toml'} doctor" in result.stdout

    config = load_config(etc / "broker.toml")
    assert config.providers == {}
    assert (config.state_dir, config.runtime_dir) == (tmp_path / "state", tmp_path / "run")
    assert (config.policy_dir, config.audit_key) == (etc / "policies", etc / "audit.key")
    assert config.fingerprint_key == etc / "fingerprint.key"
    assert (config.default_ttl, config.max_ttl, config.mount_tmpfs) == (1800, 12 * 3600, "auto")
    for provider_type in ("vault", "aws_sts", "github_app"):  # commented-out examples of every type
        assert f'# type = "{provider_type}"' in (etc / "broker.toml").read_text()
    assert (etc / "policies" / "default.yaml.example").read_text() == DEFAULT_POLICY
    assert not list((etc / "policies").glob("*.yaml"))  # nothing loaded until the operator says so
    assert load_signing_keys(etc / "audit.key").key_id in result.stdout
    assert load_fingerprint_keys(etc / "fingerprint.key").key_id in result.stdout


def test_the_embedded_default_policy_is_the_repository_file() -> None:
    assert (REPOSITORY / "policies" / "default.yaml").read_text(encoding="utf-8") == DEFAULT_POLICY


def test_a_second_init_refuses_without_force_naming_the_file(installed: BrokerEnv, tmp_path: Path) -> None:
    installed.config_path.write_text(installed.config_path.read_text() + "# edited by the operator\n")
    result = installed.run("init", *init_args(tmp_path))
    assert result.code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"broker: error: {installed.config_path} already exists; use --force")
    assert installed.config_path.read_text().endswith("# edited by the operator\n")


def test_force_overwrites_config_and_policy_but_keeps_the_audit_key(installed: BrokerEnv, tmp_path: Path) -> None:
    key_path = installed.root / "audit.key"
    key_bytes, key_id = key_path.read_bytes(), load_signing_keys(key_path).key_id
    installed.config_path.write_text("broken = [")
    (installed.policy_dir / "default.yaml.example").write_text("edited")
    result = installed.run("init", *init_args(tmp_path), "--force")
    assert result.code == 0, result.stderr
    assert f"overwritten {installed.config_path} " in result.stdout
    assert f"kept {key_path} (checkpoint signing key, key id {key_id}; never regenerated)" in result.stdout
    assert key_path.read_bytes() == key_bytes and mode(key_path) == 0o400
    assert load_config(installed.config_path).providers == {}
    assert (installed.policy_dir / "default.yaml.example").read_text() == DEFAULT_POLICY


def test_init_keeps_an_audit_key_the_broker_already_created(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    env.root.mkdir(mode=0o700)
    keys = load_or_create_keys(env.root / "audit.key", env.root / "fingerprint.key")  # as a first run does
    result = env.run("init", *init_args(tmp_path))
    assert result.code == 0, result.stderr
    assert f"kept {env.root / 'audit.key'} (checkpoint signing key, key id {keys.key_id}" in result.stdout
    assert f"kept {env.root / 'fingerprint.key'} (fingerprint key, key id {keys.fingerprints.key_id}" in result.stdout
    assert f"kept {env.root} (config directory, mode 0700)" in result.stdout  # an existing directory is left alone


# -- doctor: the whole stack -------------------------------------------------------------


@pytest.mark.server
def test_init_then_doctor_against_the_local_stack_passes_every_check(
    installed: BrokerEnv,
    openbao: OpenBao,
    aws_role: AwsRole,
    github_emulator: GitHubAppEmulator,
    github_app_keys: AppKeys,
) -> None:
    key = write_key(installed.root / "github-app.pem", github_app_keys.private_pem)
    append_providers(
        installed,
        {
            "vault": vault_table(installed, openbao.addr),
            "aws": {"type": "aws_sts", "region": REGION, "endpoint_url": aws_role.endpoint_url},
            "github": {
                "type": "github_app",
                "app_id": str(APP_ID),
                "private_key_file": str(key),
                "api_url": github_emulator.api_url,
            },
        },
    )
    enable_default_policy(installed)
    assert installed.run("policy", "lint").code == 0
    accessors = set(openbao.accessors())

    result = installed.run("doctor")
    assert (result.code, result.stderr) == (0, ""), result.stdout
    lines = lines_by_name(result)
    assert list(lines) == STACK_CHECKS
    assert all(line.startswith("✓ ") and FIX_MARK not in line for line in lines.values())
    assert "1 rule(s) in 1 file(s)" in lines["policy"]
    assert "a tmpfs is mounted per session" in lines["runtime_dir"]
    assert "noswap" in lines["runtime_dir"]  # with it, or why not
    assert "auth/token/create/broker-session: root" in lines["providers.vault.capabilities"]
    assert "arn:aws:sts::123456789012:" in lines["providers.aws.identity"]
    assert "1 installation(s): octo-org" in lines["providers.github.installations"]

    report = installed.run("doctor", "--json")
    assert report.code == 0
    document = report.json()
    assert document["ok"] is True and document["config"] == str(installed.config_path)
    assert [c["name"] for c in document["checks"]] == STACK_CHECKS
    for check in document["checks"]:
        assert set(check) == {"name", "ok", "detail", "fix"}
        assert check["ok"] is True and check["fix"] is None and check["detail"]

    # Doctor minted nothing anywhere (tokens earlier tests left may expire meanwhile: nothing new is the check).
    assert set(openbao.accessors()) <= accessors
    assert github_emulator.calls_to("create_token") == []
    assert {c.route for c in github_emulator.calls} == {"get_app", "list_installations"}


@pytest.mark.server
def test_doctor_names_missing_vault_capabilities(installed: BrokerEnv, openbao: OpenBao) -> None:
    weak = openbao.client().auth.token.create(policies=["ci-read"], ttl="10m")["auth"]
    try:
        append_providers(installed, {"vault": vault_table(installed, openbao.addr, weak["client_token"])})
        enable_default_policy(installed)
        result = installed.run("doctor")
    finally:
        openbao.client().auth.token.revoke_accessor(weak["accessor"])
    assert result.code == 2
    lines = lines_by_name(result)
    assert lines["providers.vault.login"].startswith("✓ ") and "policies ci-read" in lines["providers.vault.login"]
    capabilities = lines["providers.vault.capabilities"]
    assert capabilities.startswith("✗ ") and "lacks update on auth/token/create/broker-session" in capabilities
    assert "— fix: grant it in the broker's Vault policy" in capabilities
    assert weak["client_token"] not in result.stdout + result.stderr


@pytest.mark.server
@pytest.mark.parametrize(
    ("token_role", "ok", "fragment"),
    [
        (CHILD_ROLE, False, f"token role {CHILD_ROLE} is not orphan=true: session tokens would inherit it"),
        ("broker-session", True, "token role broker-session makes orphans, which do not inherit it"),
        (None, True, "session tokens are orphans from create-orphan and do not inherit it"),
    ],
    ids=["non-orphan-role", "orphan-role", "create-orphan"],
)
def test_doctor_flags_a_login_whose_session_tokens_would_inherit_its_entity(
    installed: BrokerEnv, openbao: OpenBao, token_role: str | None, ok: bool, fragment: str
) -> None:
    login = admin_approle(openbao)
    append_providers(installed, {"vault": approle_table(installed, openbao, login, token_role)})
    enable_default_policy(installed)
    accessors = set(openbao.accessors())
    result = installed.run("doctor")
    lines = lines_by_name(result)
    assert lines["providers.vault.capabilities"].startswith("✓ ")
    entity = lines["providers.vault.entity"]
    assert entity.startswith("✓ " if ok else "✗ "), entity
    assert f"the broker's login has entity {login.entity_id!r} (identity policies prod-admin)" in entity
    assert fragment in entity
    assert result.code == (0 if ok else 2), result.stdout
    if not ok:
        assert entity.endswith(f"— fix: set orphan=true on token role {CHILD_ROLE}")
    # Doctor logged in (one new AppRole token) and minted no session token.
    new = [openbao.lookup(a) for a in set(openbao.accessors()) - accessors]
    assert [facts["path"] for facts in new] == ["auth/approle/login"]


@pytest.mark.server
def test_doctor_fails_when_it_cannot_read_the_token_role_of_a_login_with_an_entity(
    installed: BrokerEnv, openbao: OpenBao
) -> None:
    login = admin_approle(openbao, without="auth/token/roles/*")
    append_providers(installed, {"vault": approle_table(installed, openbao, login, "broker-session")})
    enable_default_policy(installed)
    result = installed.run("doctor")
    assert result.code == 2
    entity = lines_by_name(result)["providers.vault.entity"]
    assert entity.startswith("✗ ") and "cannot tell whether token_role broker-session makes orphans" in entity
    assert entity.endswith("— fix: grant read on auth/token/roles/broker-session in the broker's Vault policy")


# -- doctor: what it reports when something is wrong -------------------------------------


def test_doctor_against_a_stopped_openbao_reports_the_provider_and_every_other_check(installed: BrokerEnv) -> None:
    append_providers(installed, {"vault": vault_table(installed, f"http://127.0.0.1:{closed_port()}", CANARY_TOKEN)})
    enable_default_policy(installed)
    result = installed.run("doctor")
    assert result.code == 2
    assert result.stderr == "broker: error: doctor: 1 of 7 checks failed\n"
    lines = lines_by_name(result)
    assert list(lines) == [*BASE_CHECKS, "providers.vault.login"]
    assert all(lines[name].startswith("✓ ") for name in BASE_CHECKS)
    login = lines["providers.vault.login"]
    assert login.startswith("✗ providers.vault.login: vault vault: token lookup-self failed: cannot reach")
    assert "— fix: check addr and the broker's token or AppRole files in [providers.vault]" in login
    assert CANARY_TOKEN not in result.stdout + result.stderr and "Traceback" not in result.stderr

    document = installed.run("doctor", "--json").json()
    assert document["ok"] is False
    failed = [c for c in document["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["providers.vault.login"] and "check addr" in failed[0]["fix"]


def test_a_runtime_dir_not_on_tmpfs_fails_when_the_broker_may_not_mount(installed: BrokerEnv) -> None:
    text = installed.config_path.read_text()
    installed.config_path.write_text(text.replace('# mount_tmpfs = "auto"', 'mount_tmpfs = "never"'))
    result = installed.run("doctor")
    assert result.code == 2
    line = lines_by_name(result)["runtime_dir"]
    assert line.startswith(f"✗ runtime_dir: runtime_dir {installed.runtime_dir} is not on tmpfs")
    assert "— fix: run the broker as root" in line and "mount -t tmpfs -o mode=0711,size=64m tmpfs" in line


def test_a_bad_policy_file_fails_the_policy_check(installed: BrokerEnv) -> None:
    installed.write_policy("rules:\n  - id: no-tasks\n    grants: []\n", name="broken.yaml")
    result = installed.run("doctor")
    assert result.code == 2
    line = lines_by_name(result)["policy"]
    assert line.startswith("✗ policy: broken.yaml: ")
    assert line.endswith("— fix: correct the file it names (broker policy lint shows the same error)")


def test_right_after_init_doctor_asks_for_a_policy_and_a_provider(installed: BrokerEnv) -> None:
    result = installed.run("doctor")
    assert result.code == 2 and result.stderr == "broker: error: doctor: 2 of 7 checks failed\n"
    lines = lines_by_name(result)
    assert list(lines) == [*BASE_CHECKS, "providers"]
    assert [name for name, line in lines.items() if line.startswith("✗ ")] == ["policy", "providers"]
    assert f"— fix: copy {installed.policy_dir / 'default.yaml.example'} to default.yaml" in lines["policy"]


@pytest.mark.parametrize(
    ("damage", "fragment"),
    [
        (lambda key: key.unlink(), "does not exist — fix: run broker init"),
        (lambda key: key.chmod(0o440), "has mode 0440, not 0400 or 0600 — fix: chmod 400"),
    ],
)
def test_a_missing_or_readable_audit_key_fails(
    installed: BrokerEnv, damage: Callable[[Path], None], fragment: str
) -> None:
    damage(installed.root / "audit.key")
    line = lines_by_name(installed.run("doctor"))["audit_key"]
    assert line.startswith("✗ audit_key: ") and fragment in line


def test_without_a_config_the_config_check_is_the_only_line(tmp_path: Path) -> None:
    env = new_env(tmp_path)
    result = env.run("doctor")
    assert result.code == 2
    assert result.stdout == (
        f"✗ config: config file {env.config_path} not found (use --config or BROKER_CONFIG)"
        " — fix: run broker init, or point --config / BROKER_CONFIG at the config file\n"
    )
    assert env.run("doctor", "--json").json()["checks"][0]["name"] == "config"


def test_help_documents_the_exit_codes_with_an_example() -> None:
    env = BrokerEnv(root=Path("/nonexistent"), runtime_dir=Path("/nonexistent"))
    doctor, init = env.run("doctor", "--help"), env.run("init", "--help")
    assert doctor.code == init.code == 0
    assert "Exit 0 when every check passes, 2 otherwise" in " ".join(doctor.stdout.split())
    assert "without --force (exit 2)" in " ".join(init.stdout.split())
    assert "Example: broker doctor" in doctor.stdout and "Example: broker init" in init.stdout


def test_clock_skew_fails_above_a_minute() -> None:
    now = 1_750_000_000.0
    assert clock_check(email.utils.formatdate(now, usegmt=True), now, "vault x") == Check(
        "clock", True, "skew +0 s against vault x"
    )
    late = clock_check(email.utils.formatdate(now - 90, usegmt=True), now, "vault x") or Check("", True, "")
    assert (late.name, late.ok) == ("clock", False) and late.detail.startswith("this host is 90 s ahead of vault x")
    assert late.fix == "synchronise this host's clock (chrony, systemd-timesyncd)"
    assert clock_check(None, now, "vault x") is None and clock_check("yesterday", now, "vault x") is None
