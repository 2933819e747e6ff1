"""``broker doctor`` without a server: what it reports when the installation itself is wrong (a runtime dir not on
tmpfs, a bad policy, a missing or readable audit key, no config), its help, and the clock check.
"""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.vocab.checks import Check
from providers.clock import clock_check
from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.install import BASE_CHECKS, lines_by_name, new_env


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


def test_a_state_dir_with_less_free_than_min_free_fails_naming_the_key(installed: BrokerEnv) -> None:
    line = lines_by_name(installed.run("doctor"))["state_dir"]
    assert line.startswith("✓ state_dir: ") and " free)" in line  # the room it has, beside its mode
    with installed.config_path.open("a", encoding="utf-8") as config:
        config.write('\n[audit]\nmin_free = "1024TiB"\n')  # more than any disk this runs on
    result = installed.run("doctor")
    line = lines_by_name(result)["state_dir"]
    assert result.code == 2 and line.startswith(f"✗ state_dir: {installed.state_dir} has ")
    assert "free, less than [audit] min_free (1024TiB) and the reserve" in line
    assert line.endswith("— fix: free space there, or lower [audit] min_free: until then no session is issued")
    assert not (installed.state_dir / "issuance.reserve").exists()  # doctor allocates nothing
