"""One line of ``broker doctor``: the check, whether it passed, what was found and, when it failed, what to do.

The core's checks (config, directories, keys, store), the daemon's and every
provider's ``health`` all make this one type; the CLI prints it as one line
(``✓ name: detail`` or ``✗ name: detail — fix: what to do``) or as JSON.
A provider names its checks locally (``login``, ``clock``); the core puts
``providers.<instance>.`` in front.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str  # what was found; never a secret
    fix: str = ""  # what to do when it failed ("" when there is nothing to add)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "fix": self.fix or None}
