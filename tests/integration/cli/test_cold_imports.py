"""What a cold process loads before its first provider call: only what its command needs.

Not timings (the bench measures those): the modules, so a change that drags the
policy, YAML or the config parser back into a path that does not use them fails here;
and the files, so a command reads its config and opens its store once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.brokerenv import BrokerEnv
from tests.fixtures.stack import STACK_TASK

PARSE_ONLY = ("broker.core.inputs.policy", "broker.core.inputs.manifest", "yaml")
#: What only a session whose proxy runs in the process needs: the listener, the terminated path, the injectors (the
#: re-signer among them), the evidence writer, the allow-list at connect time, the operations checker, the core's
#: side of it all, and the libraries they stand on.
PROXY_MACHINERY = (
    "broker.core.credential.proxied",
    "broker.egress.proxy",
    "broker.egress.terminate",
    "broker.egress.injectors",
    "broker.egress.evidence.writer",
    "broker.egress.allowlist.gate",
    "broker.egress.exchange",
    "broker.egress.operations.checker",
    "graphql",
    "h11",
    "asyncio",
)


def loaded_after(code: str, env: dict[str, str] | None = None) -> set[str]:
    program = f"import sys\n{code}\nprint('\\n'.join(sorted(sys.modules)))"
    completed = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return set(completed.stdout.split())


def test_the_direct_revoke_path_loads_no_policy_manifest_or_yaml() -> None:
    modules = loaded_after(
        "import broker.cli.app, broker.cli.sessions.revoke, broker.core.revoking, broker.core.sweeping, broker.core.status"
    )
    assert "broker.core.revoking" in modules  # the measurement sees the path's own imports
    assert sorted(m for m in modules if m.split(".")[0] == "yaml" or m in PARSE_ONLY) == []


def test_the_thin_clients_issue_reads_the_task_file_without_the_config_or_provider_vocabulary(tmp_path: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("version: 1\ntask: fix-1\ncredentials: []\n")
    env = {"PATH": os.environ["PATH"], "BROKER_SOCKET": str(tmp_path / "absent.sock")}
    code = (
        "from broker.entry import run\n"
        f"sys.argv = ['broker', 'issue', '--task', {str(task)!r}, '--json']\n"
        "try:\n    run()\nexcept SystemExit as exit:\n    assert exit.code != 0\n"
    )
    modules = loaded_after(code, env)
    assert "broker.core.inputs.strictdata" in modules  # it did read and parse the task file
    heavy = (
        "broker.core.inputs.config",
        "broker.core.inputs.manifest",
        "broker.core.inputs.policy",
        "providers.base",
        "broker.egress.allowlist.lists",
    )
    assert sorted(m for m in modules if m in heavy) == []


@pytest.mark.server
def test_a_direct_issue_without_proxied_credentials_loads_none_of_the_proxy_machinery(
    stack_env: BrokerEnv, tmp_path: Path
) -> None:
    """``broker issue`` of a session of all three providers, no ``inject: proxy`` and no ``operations``: none of the
    modules that only a proxied session runs is loaded (they cost a cold issue some 0.75 s on a busy machine)."""
    task = stack_env.write_task(STACK_TASK)
    listing = tmp_path / "modules"
    program = (
        "import sys\nfrom broker.entry import run\n"
        f"sys.argv = ['broker', '--config', {str(stack_env.config_path)!r}, 'issue', '--task', {str(task)!r}, '--json']\n"
        "try:\n    run()\n    code = 0\nexcept SystemExit as exit:\n    code = exit.code\n"
        f"open({str(listing)!r}, 'w').write('\\n'.join(sorted(sys.modules)))\nsys.exit(code)\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("BROKER_SOCKET", "BROKER_CONFIG")}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    session = json.loads(done.stdout)["session"]
    assert stack_env.run("revoke", "--session", session).code == 0
    modules = set(listing.read_text().split())
    assert {"broker.core.issuing", "providers.aws.provider", "broker.egress.destinations"} <= modules  # it issued
    assert sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in PROXY_MACHINERY)) == []


def opened_by(args: list[str], config: Path, stdin: str = "") -> dict[str, int]:
    """How often ``broker ARGS`` opened the config file and a SQLite store (the interpreter's audit events)."""
    program = (
        "import json, sys\n"
        "seen = {'config': 0, 'store': 0}\n"
        "def hook(event, args):\n"
        f"    if event == 'open' and str(args[0]) == {str(config)!r}:\n"
        "        seen['config'] += 1\n"
        "    elif event == 'sqlite3.connect':\n"
        "        seen['store'] += 1\n"
        "sys.addaudithook(hook)\n"
        "from broker.entry import run\n"
        f"sys.argv = ['broker', '--config', {str(config)!r}, *{args!r}]\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(json.dumps(seen) + '\\n')\n"
    )
    env = {key: value for key, value in os.environ.items() if key not in ("BROKER_SOCKET", "BROKER_CONFIG")}
    completed = subprocess.run(
        [sys.executable, "-c", program], input=stdin, capture_output=True, text=True, env=env, timeout=60, check=True
    )
    return dict(json.loads(completed.stderr.splitlines()[-1]))


@pytest.mark.parametrize(
    "args",
    [
        ["status"],
        ["revoke", "--session", "s-aaaaaaaaaaaa"],
        ["policy", "check", "--task", "TASK"],
        ["audit", "list"],
        ["audit", "active"],
        ["audit", "lookup", "--secret-stdin"],
    ],
)
def test_a_command_reads_its_config_once(broker_env: BrokerEnv, args: list[str]) -> None:
    """The look for a daemon and the command itself share one read; the audit commands asked for it up to 4 times."""
    task = broker_env.write_task("version: 1\ntask: fix-1\ncredentials: []\n")
    args = [str(task) if arg == "TASK" else arg for arg in args]
    assert opened_by(args, broker_env.config_path, stdin="not a secret\n")["config"] == 1


@pytest.mark.parametrize("target", [["--session", "s-aaaaaaaaaaaa"], ["--task", "fix-1"]])
def test_revoke_opens_the_store_once(broker_env: BrokerEnv, target: list[str]) -> None:
    """The store opened early to warm the revoked session's providers is the one the command works on."""
    assert broker_env.run("status").code == 0  # the store exists
    assert opened_by(["revoke", *target], broker_env.config_path) == {"config": 1, "store": 1}


TELEMETRY = ("opentelemetry", "prometheus_client", "google.protobuf", "broker.telemetry.traces")


def telemetry_modules(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == t or m.startswith(t + ".") for t in TELEMETRY))


def test_a_cold_command_without_telemetry_configured_imports_no_opentelemetry_or_prometheus(tmp_path: Path) -> None:
    config = tmp_path / "broker.toml"
    config.write_text('state_dir = "s"\nruntime_dir = "r"\npolicy_dir = "p"\naudit_key = "k/audit.key"\n')
    env = {"PATH": os.environ["PATH"], "BROKER_CONFIG": str(config)}
    for command in (["sweep", "--json"], ["status", "--json"]):
        code = (
            "from broker.entry import run\n"
            f"sys.argv = ['broker', *{command!r}]\n"
            "try:\n    run()\nexcept SystemExit as exit:\n    assert not exit.code, exit.code\n"
        )
        modules = loaded_after(code, env)
        assert "broker.core.inputs.config" in modules  # it did read the config and run the command
        assert telemetry_modules(modules) == [], command


def test_spans_and_the_telemetry_settings_load_nothing_of_opentelemetry() -> None:
    code = (
        "from pathlib import Path\n"
        "from broker.core.inputs.config import parse_config\n"
        "from broker.vocab.tracing import span, carried\n"
        "table = {'state_dir': '/tmp/s', 'runtime_dir': '/tmp/r',"
        " 'telemetry': {'otlp_endpoint': 'http://127.0.0.1:4318'}}\n"
        "assert parse_config(table, Path('/etc/broker/broker.toml')).telemetry is not None\n"
        "with span('broker issue', command='issue') as s:\n    s.set(session='s-1')\n"
        "carried(print)\n"
    )
    assert telemetry_modules(loaded_after(code)) == []
    started = loaded_after(
        "from broker.telemetry.settings import TelemetryConfig\n"
        "from broker.telemetry.traces import start_tracing\n"
        "start_tracing(TelemetryConfig('http://127.0.0.1:9/v1/traces'), host='h').close(0.1)\n"
    )
    assert "opentelemetry.sdk.trace" in telemetry_modules(started)  # the measurement sees them when tracing is on
