"""The text the session commands print, from the JSON documents alone (no typer, no core).

The direct commands and the daemon's thin client (``broker.client``) render
through these functions, so both print the same thing for the same answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from broker.vocab.durations import format_duration
from broker.vocab.time import parse_iso


def issue_text(document: dict[str, Any]) -> str:
    lines = [
        f"session {document['session']}  task {document['task']}  expires {document['expires_at']}",
        f"dir {document['dir']}  (mount it read-only at {document['mount_path']})",
    ]
    for credential in document["credentials"]:
        lines.append(
            f"  {credential['name']}: {credential['type']} via {credential['provider']},"
            f" expires {credential['expires_at']}, files {', '.join(credential['files'])}"
        )
    lines += [f"  {key}={value}" for key, value in document["env"].items()]
    return "\n".join(lines)


def revoke_lines(reports: list[dict[str, Any]]) -> list[str]:
    lines = []
    for report in reports:
        where = f"left to {report['dir_host']}'s sweep" if report.get("dir_host") else "NOT removed"
        lines.append(f"session {report['session']}: directory {'removed' if report['dir_removed'] else where}")
        lines += [f"  {c['name']} ({c['provider']}): {c['outcome']}" for c in report["credentials"]]
    return lines


def revoke_incomplete(sessions: list[str]) -> str:
    return f"revocation incomplete for {', '.join(sessions)}: pending credentials stay for broker sweep"


def network_lines(change: dict[str, Any]) -> list[str]:
    """``session allow|disallow``: ``SESSION: HOST:PORT allowed`` (or ``disallowed``)."""
    return [f"{change['session']}: {change['destination']} {'allowed' if change['allowed'] else 'disallowed'}"]


def renew_lines(renewals: list[dict[str, Any]]) -> list[str]:
    if not renewals:
        return ["nothing to renew: every credential lasts as long as the session"]
    return [
        f"  {item['name']}: expires {item['new_expires_at']} (was {item['old_expires_at']};"
        f" old one {item['old_outcome']})"
        for item in renewals
    ]


def time_left(moment: datetime, now: datetime) -> str:
    """``in 14m``, ``in 1h05m``, ``3m ago`` (expired)."""
    seconds = int((moment - now).total_seconds())
    span = abs(seconds)
    if span < 60:
        text = f"{span}s"
    elif span < 3600:
        text = f"{span // 60}m"
    else:
        text = f"{span // 3600}h{(span % 3600) // 60:02d}m"
    return f"in {text}" if seconds >= 0 else f"{text} ago"


RENEW_PENDING = "a replaced credential could not be revoked now; it stays pending for broker sweep"
STATUS_COLUMNS = ("SESSION", "TASK", "STATE", "EXPIRES", "CREDENTIALS")


def status_rows(sessions: list[dict[str, Any]], now: datetime) -> list[list[str]]:
    return [
        [
            item["session"],
            item["task"],
            item["state"],
            time_left(parse_iso(item["expires_at"]), now),
            ", ".join(f"{c['name']} ({c['type']}, {c['state']})" for c in item["credentials"]),
        ]
        for item in sessions
    ]


def decision_lines(decision: dict[str, Any]) -> list[str]:
    verdict = "allowed" if decision["allowed"] else "denied"
    ttl = format_duration(decision["session_ttl"])
    lines = [f"task {decision['task']} for {decision['requester']}: {verdict}, session ttl {ttl}"]
    for credential in decision["credentials"]:
        if credential["allowed"]:
            ttl = format_duration(credential["ttl"])
            lines.append(f"  {credential['name']}: allowed by rule {credential['rule']}, ttl {ttl}")
        else:
            lines.append(f"  {credential['name']}: denied")
            lines += [f"    - {reason}" for reason in credential["reasons"]]
    network = decision.get("network")
    if network:
        verdict = f"allowed by rule {network['rule']}" if network["allowed"] else "denied"
        lines.append(f"  network ({', '.join(network['allow'])}): {verdict}")
        lines += [f"    - {reason}" for reason in network["reasons"]]
    operations = decision.get("operations")
    if operations:
        lines += operations_lines(operations)
    return lines


def _listed(items: list[str]) -> str:
    return ", ".join(items) or "none"


def operations_lines(operations: dict[str, Any]) -> list[str]:
    """The effective operations, section by section in the order they apply (what the session's proxy enforces);
    a section whose every host an earlier one of its kind names never applies and is left out."""
    if operations["reasons"]:
        lines = ["  operations: denied (the manifest widens the rule's)"]
        return lines + [f"    - {reason}" for reason in operations["reasons"]]
    lines = [f"  operations (rule {operations['rule']}, enforced by the session's proxy):"]
    seen: dict[str, set[str]] = {"git": set(), "github_api": set(), "http": set()}

    def applies(kind: str, hosts: list[str]) -> bool:
        fresh = not set(hosts) <= seen[kind]
        seen[kind].update(hosts)
        return fresh

    for git in operations["git"]:
        if applies("git", git["hosts"]):
            delete = "allowed" if git["delete"] else "refused"
            lines.append(
                f"    git on {_listed(git['hosts'])}: fetch and clone; push {_listed(git['push'])}; deletions {delete}"
            )
    for api in operations["github_api"]:
        if applies("github_api", api["hosts"]):
            approve = "allowed" if api["reviews"]["approve"] else "refused"
            lines.append(f"    github_api on {_listed(api['hosts'])}:")
            lines.append(f"      allow {_listed(api['allow'])}")
            lines.append(f"      deny {_listed(api['deny'])}")
            lines.append(f"      review approvals {approve}; GraphQL mutations {_listed(api['graphql_mutations'])}")
    for entry in operations["http"]:
        if applies("http", [entry["host"]]):
            lines.append(f"    http on {entry['host']}: {_listed(entry['methods'])} on {_listed(entry['paths'])}")
    return lines
