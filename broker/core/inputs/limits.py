"""``sandbox.limits`` of a manifest and ``limits`` of a rule: read strictly, and the one capped by the others.

Both are ``{memory: 4GiB, cpus: 2, pids: 512}``, any of the three keys:
memory a size (``broker.vocab.sizes``: 256MiB, 4GiB; at least 4MiB), cpus a
number of CPUs (1, 0.5, 1.25: thousandths at most, up to 1024), pids a whole
number of processes (8 to 4194304). The value is ``broker.host.limits.Limits``,
which every sandbox kind enforces.

The reading (``capped``), fail closed: each key of a manifest must be at or
below the smallest value any rule the session draws on gives that key, or
the session is denied (exit 3, naming ``sandbox.limits.KEY`` and the rule);
a key the manifest leaves out gets that smallest value; a key no drawn rule
limits is the manifest's own. A manifest's limits are never dropped: under
a rule without ``limits`` they are the session's limits all the same (a
manifest may only narrow what its rules allow), and an exec whose host
cannot enforce them refuses before anything is minted rather than running
without them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from broker.host.limits import NO_LIMITS, Limits, cpus_text
from broker.vocab.fields import Fields, describe, shown

MIN_MEMORY = 4 << 20
MAX_CPUS = 1024
MIN_PIDS = 8
MAX_PIDS = 4_194_304
_CPUS = re.compile(r"(0|[1-9][0-9]{0,3})(\.[0-9]{1,3})?")
KEYS = ("memory", "cpus", "pids")


def read_limits(fields: Fields | None) -> Limits:
    """``limits``: memory, cpus and pids, each optional, at least one; anything else is refused."""
    if fields is None:
        return NO_LIMITS
    memory = fields.size("memory")
    if memory is not None and memory < MIN_MEMORY:
        raise fields.fail("memory", "at least 4MiB (a sandbox needs some memory to start)")
    cpus = _cpus(fields)
    pids = fields.integer("pids", minimum=MIN_PIDS, maximum=MAX_PIDS)
    fields.done()
    limits = Limits(memory=memory, cpus=cpus, pids=pids)
    if limits.empty:
        raise fields.fail("memory", "limits needs at least one of memory, cpus and pids")
    return limits


def _cpus(fields: Fields) -> int | None:
    value = fields.raw("cpus")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise fields.fail("cpus", f"expected a number of CPUs such as 2 or 0.5, got {describe(value)}")
    text = str(value) if not isinstance(value, float) else f"{value:.3f}".rstrip("0").rstrip(".")
    match = _CPUS.fullmatch(text)
    if match is None:
        raise fields.fail("cpus", f"{shown(text)} is not a number of CPUs (such as 2 or 0.5; thousandths at most)")
    millis = int(match.group(1)) * 1000 + int((match.group(2) or ".")[1:].ljust(3, "0"))
    if not 0 < millis <= MAX_CPUS * 1000:
        raise fields.fail("cpus", f"between 0.001 and {MAX_CPUS}")
    return millis


def capped(asked: Limits, rules: Iterable[tuple[str, Limits]]) -> tuple[Limits, tuple[str, ...]]:
    """The session's limits (the manifest's, or the smallest of its rules' for a key it leaves out) and, for each
    key the manifest asks above a rule's, the reason it is denied."""
    ceilings = list(rules)
    effective: dict[str, int | None] = {}
    reasons: list[str] = []
    for key in KEYS:
        limiting = [(rule, getattr(limits, key)) for rule, limits in ceilings if getattr(limits, key) is not None]
        smallest = min(limiting, key=lambda item: item[1]) if limiting else None
        value = getattr(asked, key)
        if value is None:
            effective[key] = smallest[1] if smallest is not None else None
            continue
        effective[key] = value
        if smallest is not None and value > smallest[1]:
            rule, ceiling = smallest
            above = f"{_text(key, value)} is above limits.{key} of rule {rule} ({_text(key, ceiling)})"
            reasons.append(f"sandbox.limits.{key}: {above}")
    return Limits(**effective), tuple(reasons)


def _text(key: str, value: int) -> str:
    return Limits(**{key: value}).shown(key) if key != "cpus" else cpus_text(value)
