"""A rule's ``sandbox_uids`` and ``sandbox_gids``: the sandbox identities its sessions may run as.

Each list holds single ids and inclusive ``"A-B"`` ranges; a rule that lists
none allows no session at all (``broker.core.inputs.policy``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.vocab.fields import Fields, shown

ID_RANGE = re.compile(r"([0-9]{1,10})-([0-9]{1,10})")
MAX_ID = 2**32 - 2  # (uid_t)-1 is "no change" to chown and setuid


@dataclass(frozen=True)
class IdSet:
    """The sandbox uids or gids a rule allows: single ids and inclusive ``A-B`` ranges."""

    ranges: tuple[tuple[int, int], ...]

    def __contains__(self, value: int) -> bool:
        return any(low <= value <= high for low, high in self.ranges)

    @property
    def empty(self) -> bool:
        return not self.ranges


NO_IDS = IdSet(())


def read_id_set(fields: Fields, key: str) -> IdSet:
    """``sandbox_uids``/``sandbox_gids``: integers or ``"A-B"`` ranges; absent means none."""
    value = fields.raw(key)
    if value is None:
        return NO_IDS
    if not isinstance(value, list):
        raise fields.fail(key, 'expected a list of ids or "A-B" ranges')
    if len(value) > 100:
        raise fields.fail(key, "has more than 100 items")
    ranges: list[tuple[int, int]] = []
    for index, item in enumerate(value):
        where = f"{key}[{index}]"
        if isinstance(item, int) and not isinstance(item, bool):
            low = high = item
        elif isinstance(item, str) and (match := ID_RANGE.fullmatch(item)):
            low, high = int(match.group(1)), int(match.group(2))
        else:
            raise fields.fail(where, f'expected an id or an "A-B" range, got {shown(str(item))}')
        if not 0 <= low <= high <= MAX_ID:
            raise fields.fail(where, f"{low}-{high} is not a range of ids between 0 and {MAX_ID}")
        ranges.append((low, high))
    return IdSet(tuple(ranges))
