"""The container's command line: every guarantee in its flags, nothing of the environment in its argv, and the
operator's options read strictly."""

from __future__ import annotations

import pytest

from broker.host.containers.engine import (
    ContainerSpec,
    EngineOptions,
    env_file_content,
    read_engine_options,
    read_engines,
    run_argv,
)
from broker.host.limits import Limits
from broker.vocab.errors import BadInput, ConfigError
from broker.vocab.fields import Fields

pytestmark = pytest.mark.unit


def spec(**changes: object) -> ContainerSpec:
    values: dict[str, object] = {
        "engine": "podman",
        "image": "localhost/agent:1",
        "name": "broker-s-abc",
        "uid": 1000,
        "gid": 1001,
        "secrets_dir": "/run/broker/s-abc",
        "mount_path": "/run/secrets",
        "workspace": "/srv/repo",
        "env_file": "/tmp/broker-exec-x/env",
        "network": "none",
        "program": "/usr/bin/podman",
    }
    values.update(changes)
    return ContainerSpec(**values)  # type: ignore[arg-type]


def test_the_run_holds_every_guarantee_and_the_command_last() -> None:
    argv = run_argv(spec(), ["make", "test"])
    assert argv[:2] == ["/usr/bin/podman", "run"]
    for flag in (
        "--rm",
        "--pull=never",
        "--init",
        "--user=1000:1001",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--read-only",
        "--network=none",
        "--env-file=/tmp/broker-exec-x/env",
        "--workdir=/workspace",
        "--name=broker-s-abc",
    ):
        assert flag in argv
    assert argv[argv.index("--volume") + 1] == "/run/broker/s-abc:/run/secrets:ro"
    assert "/srv/repo:/workspace:rw" in argv
    assert argv[-3:] == ["localhost/agent:1", "make", "test"]
    assert not any(arg.startswith(("--env=", "-e")) for arg in argv)


def test_a_writable_root_a_tmpfs_workspace_and_read_only_binds() -> None:
    argv = run_argv(spec(read_only_root=False, workspace=None, read_only_binds=("/usr/lib/python3.11",)), ["true"])
    assert "--read-only" not in argv
    assert "--tmpfs=/workspace:rw,mode=1777" in argv
    assert "/usr/lib/python3.11:/usr/lib/python3.11:ro" in argv


def test_limits_are_the_engines_flags_and_memory_the_session_cgroups() -> None:
    limited = spec(limits=Limits(memory=1 << 30, cpus=1500, pids=64), cgroup_parent="/broker/s-abc")
    argv = run_argv(limited, ["true"])
    assert argv[1] == "--cgroup-manager=cgroupfs"  # podman's global option, before run
    assert {"--cpus=1.5", "--pids-limit=64", "--cgroup-parent=/broker/s-abc"} <= set(argv)
    assert not any(arg.startswith("--memory") for arg in argv)


def test_the_operators_options_come_before_the_image() -> None:
    options = EngineOptions(runtime="runc", ulimits=("nofile=4096:4096",), extra_args=("--log-driver=k8s-file",))
    argv = run_argv(spec(options=options, network="ns:/proc/42/ns/net"), ["true"])
    at = argv.index("localhost/agent:1")
    assert {"--runtime=runc", "--ulimit=nofile=4096:4096", "--log-driver=k8s-file"} <= set(argv[:at])
    assert "--network=ns:/proc/42/ns/net" in argv


def test_a_path_the_engine_would_split_is_refused() -> None:
    with pytest.raises(BadInput, match="cannot be bound into a container"):
        run_argv(spec(workspace="/srv/a:b"), ["true"])


def test_the_env_file_holds_each_variable_on_its_line() -> None:
    assert env_file_content({"PATH": "/usr/bin", "BROKER_SESSION": "s-abc"}) == b"PATH=/usr/bin\nBROKER_SESSION=s-abc\n"
    with pytest.raises(BadInput):
        env_file_content({"X": "a\nY=b"})


def options(table: dict[str, object]) -> EngineOptions:
    return read_engine_options(Fields(table, "sandbox.podman", ConfigError))


def test_the_operators_options_are_read() -> None:
    read = options({"runtime": "runc", "ulimits": ["nofile=1024:1024", "nproc=-1"], "extra_args": ["--label=a=b"]})
    assert read == EngineOptions("runc", ("nofile=1024:1024", "nproc=-1"), ("--label=a=b",))
    assert read_engines(Fields({"podman": {"runtime": "runc"}}, "sandbox", ConfigError)) == {
        "podman": EngineOptions("runc")
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"extra_args": ["--privileged=true"]}, "--privileged is not one the broker passes on"),
        ({"extra_args": ["--cap-add=SYS_ADMIN"]}, "--cap-add is not one the broker passes on"),
        ({"extra_args": ["--volume=/:/host"]}, "--volume is not one the broker passes on"),
        ({"extra_args": ["--network=host"]}, "--network is not one the broker passes on"),
        ({"extra_args": ["--user=0"]}, "--user is not one the broker passes on"),
        ({"extra_args": ["--security-opt=seccomp=unconfined"]}, "a security-opt here names a seccomp or apparmor"),
        ({"extra_args": ["--security-opt=label=disable"]}, "a security-opt here names a seccomp or apparmor"),
        ({"extra_args": ["--privileged"]}, "is not --NAME=VALUE"),
        ({"ulimits": ["nofile=lots"]}, "sandbox.podman.ulimits[0]: 'nofile=lots' is not valid"),
        ({"ulimits": ["files=1"]}, "sandbox.podman.ulimits[0]: 'files=1' is not valid"),
        ({"runtime": "runc --debug"}, "sandbox.podman.runtime: 'runc --debug' is not valid"),
        ({"memory": "1g"}, "sandbox.podman.memory: unknown key"),
    ],
)
def test_what_would_undo_a_guarantee_is_refused(table: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        options(table)
    assert message in refused.value.message
