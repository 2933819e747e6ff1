"""The session document: what ``issue`` hands the launcher, one frozen value.

The same JSON leaves by every path: printed by ``issue --json`` (and the
``--format`` renderings of it), answered by the daemon, written into the
session directory as ``session.json`` and kept in the store, where ``renew``
reads it back to change its credentials' ends. It holds paths, the session
id and non-secret hints only, never a secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from broker.host.limits import NO_LIMITS, Limits


@dataclass(frozen=True)
class IssuedCredential:
    """One credential as the launcher sees it: where its files are and what it may do until when."""

    name: str
    provider: str
    type: str
    expires_at: str
    files: tuple[str, ...]
    scope: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "provider": self.provider,
            "type": self.type,
            "expires_at": self.expires_at,
            "files": list(self.files),
            "scope": dict(self.scope),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IssuedCredential:
        return cls(
            name=str(data["name"]),
            provider=str(data["provider"]),
            type=str(data["type"]),
            expires_at=str(data["expires_at"]),
            files=tuple(data["files"]),
            scope=dict(data["scope"]),
        )


@dataclass(frozen=True)
class SessionDocument:
    """A session as ``issue`` delivers it (``session.json``)."""

    id: str
    task: str
    expires_at: str
    dir: str
    mount_path: str
    credentials: tuple[IssuedCredential, ...]
    env: Mapping[str, str]
    host: str | None = None  # a fleet's store: the host holding the directory (only it touches it)
    parent: str | None = None  # a delegated session: the session it was delegated from (revoked with it)
    proxy_url: str | None = None  # a gateway's session: its proxy, user and no secret (that is proxy/credential)
    limits: Limits = NO_LIMITS  # what its sandbox may use (the manifest's sandbox.limits within its rules')

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "session": self.id,
            "task": self.task,
            "expires_at": self.expires_at,
            "dir": self.dir,
            "mount_path": self.mount_path,
            "credentials": [credential.to_json() for credential in self.credentials],
            "env": dict(self.env),
        }
        if self.host is not None:
            document["host"] = self.host
        if self.parent is not None:
            document["parent"] = self.parent
        if self.proxy_url is not None:
            document["proxy_url"] = self.proxy_url
        if not self.limits.empty:
            document["limits"] = self.limits.to_json()
        return document

    def file_content(self) -> bytes:
        """``session.json`` as written into the session directory."""
        return json.dumps(self.to_json(), indent=2).encode() + b"\n"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SessionDocument:
        """The document as the store keeps it."""
        host, parent, proxy_url = data.get("host"), data.get("parent"), data.get("proxy_url")
        return cls(
            id=str(data["session"]),
            task=str(data["task"]),
            expires_at=str(data["expires_at"]),
            dir=str(data["dir"]),
            mount_path=str(data["mount_path"]),
            credentials=tuple(IssuedCredential.from_json(c) for c in data["credentials"]),
            env=dict(data["env"]),
            host=str(host) if host is not None else None,
            parent=str(parent) if parent is not None else None,
            proxy_url=str(proxy_url) if proxy_url is not None else None,
            limits=Limits.from_json(data.get("limits")),
        )

    def renewed(self, expiry: Mapping[str, str]) -> SessionDocument:
        """The document with new ends for the named credentials (``renew``)."""
        credentials = tuple(replace(c, expires_at=expiry.get(c.name, c.expires_at)) for c in self.credentials)
        return replace(self, credentials=credentials)
