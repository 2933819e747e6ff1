"""Anchored glob patterns for policy files: ``*`` and ``?`` only, nothing else is special.

Two flavours: path-like globs (task names, ``owner/repo``) where ``*`` stops at
``/``, and IAM-style globs (ARNs, actions) where ``*`` matches anything.
``glob_within`` decides whether every string one IAM-style glob matches is also
matched by another: what a check needs when the request itself holds wildcards.
"""

from __future__ import annotations

import re
from collections import deque
from functools import lru_cache

#: Containment gives up (answers "not contained") beyond this many explored states.
MAX_CONTAINMENT_STATES = 200_000


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


def glob_within(requested: str, granted: str, *, ignore_case: bool = False) -> bool:
    """Whether every string matched by the glob ``requested`` is matched by the glob ``granted``.

    Both are IAM-style globs (``*`` any run, ``?`` one character, nothing else
    special). Decided exactly by exploring ``requested``'s automaton against the
    subset construction of ``granted``'s, over the characters either pattern
    names plus one symbol standing for every other character.
    """
    if ignore_case:
        requested, granted = requested.lower(), granted.lower()
    if requested == granted or (granted and not granted.strip("*")):
        return True
    symbols = [*sorted({c for c in requested + granted if c not in "*?"}), ""]  # "" = any other char
    end_p, end_g = len(requested), len(granted)
    start = frozenset(_closure(granted, {0}))
    queue: deque[tuple[int, frozenset[int]]] = deque((p, start) for p in _closure(requested, {0}))
    seen = set(queue)
    while queue:
        p, states = queue.popleft()
        if p == end_p:
            if end_g not in states:
                return False
            continue
        char = requested[p]
        step_to = p if char == "*" else p + 1
        for symbol in symbols if char in "*?" else [char]:
            after = frozenset(_step(granted, states, symbol))
            for q in _closure(requested, {step_to}):
                pair = (q, after)
                if pair not in seen:
                    if len(seen) >= MAX_CONTAINMENT_STATES:
                        return False  # fail closed
                    seen.add(pair)
                    queue.append(pair)
    return True


def _closure(pattern: str, states: set[int]) -> set[int]:
    """Add the states reachable without consuming a character (a ``*`` may match nothing)."""
    result = set(states)
    pending = list(states)
    while pending:
        state = pending.pop()
        if state < len(pattern) and pattern[state] == "*" and state + 1 not in result:
            result.add(state + 1)
            pending.append(state + 1)
    return result


def _step(pattern: str, states: frozenset[int], symbol: str) -> set[int]:
    following: set[int] = set()
    for state in states:
        if state == len(pattern):
            continue
        char = pattern[state]
        if char == "*":
            following.add(state)
        elif char == "?" or char == symbol:
            following.add(state + 1)
    return _closure(pattern, following)
