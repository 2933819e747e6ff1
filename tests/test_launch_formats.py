"""Golden output of ``issue --format`` for launchers: env, docker, podman, bwrap."""

from __future__ import annotations

import shlex

import pytest

from broker.launch_formats import render

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
