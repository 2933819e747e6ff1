"""Where git talks to for a GitHub API, and the sandbox's git config that hands git the token.

``api_url`` maps to the git host: ``https://api.github.com`` to ``https://github.com``,
``https://api.SUB.ghe.com`` to ``https://SUB.ghe.com``, GitHub Enterprise Server's
``https://HOST/api/v3`` to ``https://HOST``, and anything else (the local emulator)
to its own scheme, host and port. The git config holds a credential helper
scoped to that host which prints ``x-access-token`` and the token file's content;
the token itself is never written into the config.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import urlsplit

from providers.urls import is_loopback_host

_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.\-]{0,251}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_PATH = re.compile(r"(/[A-Za-z0-9._~\-]+)*/?")
_SAFE_PATH = re.compile(r"/[A-Za-z0-9._/\-]+")


@dataclass(frozen=True)
class GitHost:
    scheme: str
    netloc: str  # host[:port]

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}"


def check_api_url(value: str) -> str | None:
    """Why ``value`` is unfit as ``api_url``, or None. https only, except on loopback."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return "is not a URL"
    if parts.scheme not in ("https", "http"):
        return "must start with https://"
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return "must not carry credentials, a query or a fragment"
    host = parts.hostname or ""
    if not _HOST.fullmatch(parts.netloc.rsplit(":", 1)[0] if port else parts.netloc):
        return "has no valid host"
    if not _PATH.fullmatch(parts.path):
        return "has an invalid path"
    if parts.scheme == "http" and not is_loopback_host(host):
        return "must use https:// (plain http only for a loopback test server)"
    return None


def git_host(api_url: str) -> GitHost:
    parts = urlsplit(api_url)
    host = (parts.hostname or "").lower()
    path = parts.path.rstrip("/")
    if host == "api.github.com" and not path:
        return GitHost("https", "github.com")
    if host.startswith("api.") and host.endswith(".ghe.com") and not path:
        return GitHost("https", host.removeprefix("api."))
    return GitHost(parts.scheme, parts.netloc.lower())


def _config_quote(text: str) -> str:
    """``text`` as a double-quoted git config value (backslash and quote escaped)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def gitconfig(host: GitHost, token_path: PurePosixPath) -> str:
    """A git config whose credential helper, for ``host`` only, reads ``token_path``."""
    path = str(token_path)
    if not _SAFE_PATH.fullmatch(path):
        raise ValueError("token path has characters a credential helper cannot take")
    # Git runs "!..." helpers through the shell with the action appended ("get", "store", "erase").
    # printf's \n reaches the shell as backslash-n: doubled here, escaped again by _config_quote.
    script = (
        '!f() { if test "$1" = get; then'
        " printf 'username=x-access-token\\npassword=%s\\n'"
        f' "$(cat {shlex.quote(path)})"; fi; }}; f'
    )
    return (
        "# Written by scoped-credential-broker: git asks this helper for the installation token.\n"
        f'[credential "{host.url}"]\n'
        "\t# An empty helper first drops any helper configured elsewhere (system config).\n"
        "\thelper =\n"
        f"\thelper = {_config_quote(script)}\n"
    )
