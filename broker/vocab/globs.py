"""Anchored glob patterns for policy files: ``*`` and ``?`` only, nothing else is special.

Two flavours: path-like globs (task names, ``owner/repo``) where ``*`` stops at
``/``, and IAM-style globs (ARNs, actions) where ``*`` matches anything.
"""

from __future__ import annotations

import re
from functools import lru_cache


@lru_cache(maxsize=4096)
def compile_glob(pattern: str, *, cross_slash: bool = False, ignore_case: bool = False) -> re.Pattern[str]:
    star = ".*" if cross_slash else "[^/]*"
    one = "." if cross_slash else "[^/]"
    parts = []
    for char in pattern:
        if char == "*":
            parts.append(star)
        elif char == "?":
            parts.append(one)
        else:
            parts.append(re.escape(char))
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.compile("".join(parts), flags)


def glob_match(pattern: str, value: str, *, cross_slash: bool = False, ignore_case: bool = False) -> bool:
    return compile_glob(pattern, cross_slash=cross_slash, ignore_case=ignore_case).fullmatch(value) is not None


def any_match(patterns: tuple[str, ...], value: str, **kwargs: bool) -> bool:
    return any(glob_match(p, value, **kwargs) for p in patterns)
