"""The session environment's hints in docs/reference.md: the ``env`` names a session document may carry.

Beside the key tables of ``broker.cli.manual`` (what the loaders read),
this is what the broker writes: the session id, and what each provider
type's credentials set (``ProviderManual.hints``, declared in the
provider's package). A test issues Vault dynamic secrets and checks that
every name they set is in this table.
"""

from __future__ import annotations

from broker.core.inputs.manifest import RESERVED_ENV_PREFIX, reserved_env
from broker.vocab.manual import Hint
from providers.registry import provider_classes

#: What the broker itself puts in every session's ``env``.
CORE_HINTS = (Hint("BROKER_SESSION", "every session", "The session id."),)


def hints() -> tuple[Hint, ...]:
    """Every hint: the core's, then each registered provider type's."""
    return CORE_HINTS + tuple(hint for cls in provider_classes() for hint in cls.manual().hints)


def render_hints() -> list[str]:
    every = hints()
    free = [h.name for h in every if h.name not in reserved_env() and not h.name.startswith(RESERVED_ENV_PREFIX)]
    lines = ["", "## Session environment", "", "Hints the session document's `env` carries: paths inside the"]
    lines += ["sandbox, addresses and the session id, never a secret (`<NAME>`: the credential's name upper-cased,"]
    lines += ["`-` as `_`; the first credential wins a name). `sandbox.env` may set none of them but"]
    lines += [f"{', '.join(f'`{name}`' for name in free)} (a credential's hint wins over it), nor any other"]
    lines += ["`BROKER_*` name.", ""]
    lines += ["| variable | set by | meaning |", "|---|---|---|"]
    lines += [f"| `{h.name}` | {h.kind} | {h.description} |" for h in every]
    return lines
