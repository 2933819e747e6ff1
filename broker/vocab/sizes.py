"""Sizes in the config: ``64MiB``, ``1GiB``, ``512KiB`` or a whole number of bytes.

Binary units only (KiB, MiB, GiB, TiB), written right after the number: one
spelling each, so ``64MB`` (which a reader could take for 10^6 or 2^20) is
refused rather than guessed at.
"""

from __future__ import annotations

import re

from broker.vocab.errors import BadInput

_SIZE = re.compile(r"(0|[1-9][0-9]{0,12})(KiB|MiB|GiB|TiB)?")
_UNITS = {"": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
#: Nothing the broker sizes is near a pebibyte; a larger value is a typo.
MAX_SIZE = 1 << 50


def parse_size(value: object, field: str, error: type[BadInput] = BadInput) -> int:
    """Bytes for a size value (an integer of bytes, or a string such as ``64MiB``); raise ``error`` naming ``field``."""
    if isinstance(value, bool):
        raise error(f"{field}: expected a size such as 64MiB or 1GiB, got a boolean")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if match is None:
            raise error(f"{field}: {value[:40]!r} is not a size (a whole number followed by KiB, MiB, GiB or TiB)")
        size = int(match.group(1)) * _UNITS[match.group(2) or ""]
    else:
        raise error(f"{field}: expected a size such as 64MiB or 1GiB")
    if size < 0:
        raise error(f"{field}: a size must not be negative")
    if size > MAX_SIZE:
        raise error(f"{field}: larger than the 1024TiB the broker accepts")
    return size


def format_size(size: int) -> str:
    """The largest exact unit when there is one (``67108864`` -> ``64MiB``), else one decimal of the largest unit
    below it (``1536000`` -> ``1.5MiB``); bytes below 1 KiB."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _UNITS[unit]
        if size >= scale:
            whole, rest = divmod(size, scale)
            return f"{whole}{unit}" if rest == 0 else f"{size / scale:.1f}{unit}"
    return f"{size}B"
