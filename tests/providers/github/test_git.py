"""The ``github_app`` credential's git config: ``git credential fill`` gives the token for the App's host only, and
the config overrides the system's own credential helpers.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath

import pytest

from broker.vocab.secret import Secret
from devstack.github_app import GitHubAppEmulator
from providers.base import MintedCredential
from providers.github.git import GitHost, git_host, gitconfig
from tests.fixtures.github import MakeProvider
from tests.fixtures.github_app import ASK, context, parse


def git_fill(
    gitconfig_path: Path, home: Path, url: str, system: Path | None = None
) -> subprocess.CompletedProcess[str]:
    protocol, host = url.split("://")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(gitconfig_path),
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
    }
    if system is None:
        env["GIT_CONFIG_NOSYSTEM"] = "1"
    else:
        env["GIT_CONFIG_SYSTEM"] = str(system)
    stdin = f"protocol={protocol}\nhost={host}\npath=octo-org/widgets.git\n\n"
    return subprocess.run(
        ["git", "credential", "fill"], input=stdin, env=env, capture_output=True, text=True, timeout=30
    )


def write_credential(credential: MintedCredential, directory: Path) -> None:
    directory.mkdir(parents=True)
    for name, content in credential.files.items():
        text = content.reveal() if isinstance(content, Secret) else content
        (directory / name).write_text(text)


@pytest.mark.server
@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is not installed")
def test_git_credential_fill_yields_the_token(
    make_github_provider: MakeProvider, github_emulator: GitHubAppEmulator, tmp_path: Path
) -> None:
    mount = tmp_path / "secrets" / "repo"
    credential = make_github_provider().mint(parse(ASK), context(mount=str(mount)))
    write_credential(credential, mount)
    home = tmp_path / "home"
    home.mkdir()
    result = git_fill(mount / "gitconfig", home, github_emulator.url)
    assert result.returncode == 0, result.stderr
    assert "username=x-access-token\n" in result.stdout
    assert f"password={credential.secret.reveal()}\n" in result.stdout
    assert credential.secret.reveal() not in (mount / "gitconfig").read_text()
    elsewhere = git_fill(mount / "gitconfig", home, "https://gitlab.com")
    assert elsewhere.returncode != 0 and credential.secret.reveal() not in elsewhere.stdout


@pytest.mark.skipif(not Path("/usr/bin/git").exists(), reason="git is not installed")
def test_git_config_for_github_com_overrides_system_helpers(tmp_path: Path) -> None:
    mount = tmp_path / "run secrets'x" / "repo"  # a path that needs shell quoting
    mount.mkdir(parents=True)
    (mount / "token").write_text("ghs_canaryTOKEN123")
    with pytest.raises(ValueError, match="credential helper"):
        gitconfig(GitHost("https", "github.com"), PurePosixPath(mount / "token"))
    mount = tmp_path / "secrets" / "repo"
    mount.mkdir(parents=True)
    (mount / "token").write_text("ghs_canaryTOKEN123")
    (mount / "gitconfig").write_text(gitconfig(git_host("https://api.github.com"), PurePosixPath(mount / "token")))
    system = tmp_path / "system-gitconfig"
    system.write_text('[credential]\n\thelper = "!f() { echo username=sys; echo password=from-system; }; f"\n')
    result = git_fill(mount / "gitconfig", tmp_path, "https://github.com", system=system)
    assert result.returncode == 0, result.stderr
    assert "password=ghs_canaryTOKEN123\n" in result.stdout and "from-system" not in result.stdout
