"""Golden output of ``issue --format`` for launchers: env, docker, podman, bwrap."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from broker.cli.sessions.launch_formats import render

DOCUMENT = {
    "session": "s-4k2j9x7q3m1p",
    "task": "fix-build-123",
    "expires_at": "2026-11-29T10:30:00Z",
    "dir": "/run/broker/s-4k2j9x7q3m1p",
    "mount_path": "/run/secrets",
    "credentials": [],
    "env": {
        "GIT_CONFIG_GLOBAL": "/run/secrets/repo/gitconfig",
        "VAULT_ADDR": "http://127.0.0.1:8200",
        "BROKER_SESSION": "s-4k2j9x7q3m1p",
    },
}

GOLDEN = {
    "env": (
        "export GIT_CONFIG_GLOBAL=/run/secrets/repo/gitconfig\n"
        "export VAULT_ADDR=http://127.0.0.1:8200\n"
        "export BROKER_SESSION=s-4k2j9x7q3m1p"
    ),
    "docker": (
        "--mount type=bind,src=/run/broker/s-4k2j9x7q3m1p,dst=/run/secrets,readonly "
        "--label broker.session=s-4k2j9x7q3m1p "
        "--env GIT_CONFIG_GLOBAL=/run/secrets/repo/gitconfig "
        "--env VAULT_ADDR=http://127.0.0.1:8200 "
        "--env BROKER_SESSION=s-4k2j9x7q3m1p"
    ),
    "bwrap": (
        "--ro-bind /run/broker/s-4k2j9x7q3m1p /run/secrets "
        "--setenv GIT_CONFIG_GLOBAL /run/secrets/repo/gitconfig "
        "--setenv VAULT_ADDR http://127.0.0.1:8200 "
        "--setenv BROKER_SESSION s-4k2j9x7q3m1p"
    ),
}
GOLDEN["podman"] = GOLDEN["docker"]


@pytest.mark.parametrize("fmt", sorted(GOLDEN))
def test_golden_output(fmt: str) -> None:
    assert render(DOCUMENT, fmt) == GOLDEN[fmt]


def test_values_are_quoted_for_the_shell() -> None:
    hostile = dict(DOCUMENT, env={"VAULT_ADDR": "http://x'; rm -rf / #"})
    line = render(hostile, "env")
    assert shlex.split(line) == ["export", "VAULT_ADDR=http://x'; rm -rf / #"]
    assert shlex.split(render(hostile, "docker"))[-1] == "VAULT_ADDR=http://x'; rm -rf / #"


def test_the_session_file_is_written_but_never_through_a_symlink(tmp_path: Path) -> None:
    from broker.cli.sessions.launch_formats import write_session_file
    from broker.vocab.errors import BadInput

    path = tmp_path / "session"
    write_session_file(path, "s-4k2j9x7q3m1p")
    write_session_file(path, "s-aaaaaaaaaaaa")  # replaced, not appended
    assert path.read_text() == "s-aaaaaaaaaaaa\n"
    assert path.stat().st_mode & 0o777 == 0o600
    victim = tmp_path / "victim"
    victim.write_text("precious")
    planted = tmp_path / "planted"
    planted.symlink_to(victim)
    with pytest.raises(BadInput, match="symbolic link"):
        write_session_file(planted, "s-4k2j9x7q3m1p")
    assert victim.read_text() == "precious"
    with pytest.raises(BadInput, match="Is a directory"):
        write_session_file(tmp_path, "s-4k2j9x7q3m1p")
    if os.geteuid() == 0:  # a file another user left there is not written into
        theirs = tmp_path / "theirs"
        theirs.write_text("theirs")
        os.chown(theirs, 1000, 1000)
        with pytest.raises(BadInput, match="belongs to another user"):
            write_session_file(theirs, "s-4k2j9x7q3m1p")
        assert theirs.read_text() == "theirs"


GATEWAY_DOCUMENT = dict(
    DOCUMENT,
    proxy_url="https://s-4k2j9x7q3m1p@10.89.0.1:3128",
    env={"SSL_CERT_FILE": "/run/secrets/ca-bundle.pem", "NO_PROXY": "localhost,127.0.0.1"},
)


def test_a_gateway_session_passes_its_proxy_variables_by_file_never_on_the_command_line() -> None:
    """The proxy variables carry the proxy credential: the engine reads them from proxy/env (--env-file), a shell
    sources it; neither stdout nor an argv holds the secret, which is nowhere in the document."""
    docker = shlex.split(render(GATEWAY_DOCUMENT, "docker"))
    assert docker[-2:] == ["--env-file", "/run/broker/s-4k2j9x7q3m1p/proxy/env"]
    assert "--env" in docker and "SSL_CERT_FILE=/run/secrets/ca-bundle.pem" in docker
    assert render(GATEWAY_DOCUMENT, "podman") == render(GATEWAY_DOCUMENT, "docker")
    env = render(GATEWAY_DOCUMENT, "env").splitlines()
    assert env[-1] == "set -a; . /run/broker/s-4k2j9x7q3m1p/proxy/env; set +a"
    assert all("HTTPS_PROXY" not in line for line in env)


def test_the_container_formats_carry_the_sessions_limits() -> None:
    """A container the launcher starts is held to the limits the policy allowed: the engine's own flags."""
    limited = dict(DOCUMENT, limits={"memory": 268435456, "cpus": 1.5, "pids": 128})
    docker = shlex.split(render(limited, "docker"))
    assert docker[-3:] == ["--memory=268435456b", "--cpus=1.5", "--pids-limit=128"]
    assert render(limited, "podman") == render(limited, "docker")
    assert "--cpus=2" in shlex.split(render(dict(DOCUMENT, limits={"cpus": 2}), "docker"))
    assert "limit" not in render(limited, "bwrap") and "memory" not in render(limited, "env")
