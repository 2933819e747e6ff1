"""A manifest's ``operations.mcp`` entry within its rule's: what widens, and the entry that applies.

Within means: every ``tools.allow`` and ``prompts.allow`` glob of the
manifest's lies within one of the rule's (every name it matches, the rule's
matches: ``broker.vocab.globs.glob_within``), and every ``resources`` glob
within one of the rule's (``SegmentGlob.within``). The rule's ``deny`` globs
and its ``arguments`` rules always stay: they are added to the manifest's, so
a manifest can add limits and never take one away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from broker.egress.operations.mcp.model import McpOperations, Names
from broker.vocab.globs import glob_within


def _listed(items: Sequence[object]) -> str:
    return ", ".join(str(i) for i in items) or "none"


def _names(key: str, asked: Names, granted: Names, problems: list[str]) -> Names:
    for index, glob in enumerate(asked.allow):
        if not any(glob_within(glob, mine) for mine in granted.allow):
            problems.append(f"{key}.allow[{index}]: {glob} is not within the rule's allow ({_listed(granted.allow)})")
    return Names(asked.allow, asked.deny + tuple(d for d in granted.deny if d not in asked.deny))


def narrow_mcp(asked: McpOperations, granted: McpOperations, problems: list[str]) -> McpOperations:
    """``asked`` (a manifest's entry) with ``granted``'s (its rule's) limits added; each widening key of ``asked``
    appended to ``problems``."""
    key = f"operations.mcp.{asked.host}"
    tools = _names(f"{key}.tools", asked.tools, granted.tools, problems)
    prompts = _names(f"{key}.prompts", asked.prompts, granted.prompts, problems)
    for index, glob in enumerate(asked.resources):
        if not any(glob.within(mine) for mine in granted.resources):
            problems.append(
                f"{key}.resources[{index}]: {glob} is not within the rule's resources ({_listed(granted.resources)})"
            )
    arguments = asked.arguments + tuple(rule for rule in granted.arguments if rule not in asked.arguments)
    return replace(asked, tools=tools, arguments=arguments, prompts=prompts)
