"""The text the session commands print, from the JSON documents alone (no typer, no core).

The command table names each daemon command's renderer (``render``, a
function of the answer's document and the command's values that prints it);
the direct command and the daemon's thin client (``broker.client``) both
print through it, so both print the same thing for the same answer. The
lines each renderer is made of are here too. A cold path: times (and
``datetime``) are loaded by what shows one, a table's library (rich) only for
a status with sessions to list.
"""

from __future__ import annotations

import json
import sys

from broker.vocab.durations import format_duration
from broker.vocab.sizes import format_size

TYPE_CHECKING = False  # typing itself is not imported at run time: the thin client prints through this module
if TYPE_CHECKING:
    from collections.abc import Mapping
    from datetime import datetime
    from typing import Any


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
    return [_renew_line(item) for item in renewals]


def _renew_line(item: dict[str, Any]) -> str:
    """One renewal: a file credential's, or what a running exec did for a proxied one (``outcome``)."""
    outcome = item.get("outcome")
    if outcome is None or (outcome == "renewed" and "new_expires_at" in item):
        behind = " behind its placeholder" if outcome else ""
        return (
            f"  {item['name']}: expires {item['new_expires_at']}{behind} (was {item['old_expires_at']};"
            f" old one {item['old_outcome']})"
        )
    if outcome == "renewed":
        return f"  {item['name']}: KV version {item['version']} behind its placeholder (was {item['previous_version']})"
    if outcome == "unchanged":
        return f"  {item['name']}: KV version {item['version']} is still the current one; nothing to swap"
    return f"  {item['name']}: {outcome}: {item.get('reason', '')}"


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
    from broker.vocab.time import parse_iso

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
    limits = decision.get("limits")
    if limits:
        lines += limits_lines(limits)
    return lines


def limits_lines(limits: dict[str, Any]) -> list[str]:
    """The sandbox's limits (``sandbox.limits`` within its rules'), or why the manifest's are denied."""
    if limits["reasons"]:
        return ["  sandbox limits: denied", *(f"    - {reason}" for reason in limits["reasons"])]
    values = ", ".join(
        f"{key} {format_size(limits[key]) if key == 'memory' else limits[key]}"
        for key in ("memory", "cpus", "pids")
        if key in limits
    )
    return [f"  sandbox limits: {values}"]


def _listed(items: list[str]) -> str:
    return ", ".join(items) or "none"


def operations_lines(operations: dict[str, Any]) -> list[str]:
    """The effective operations, section by section in the order they apply (what the session's proxy enforces);
    a section whose every host an earlier one of its kind names never applies and is left out."""
    if operations["reasons"]:
        lines = ["  operations: denied (the manifest widens the rule's)"]
        return lines + [f"    - {reason}" for reason in operations["reasons"]]
    lines = [f"  operations (rule {operations['rule']}, enforced by the session's proxy):"]
    seen: dict[str, set[str]] = {"git": set(), "github_api": set(), "http": set(), "mcp": set()}

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
    for entry in operations.get("mcp", []):
        if applies("mcp", [entry["host"]]):
            tools, prompts = entry["tools"], entry["prompts"]
            globs = [f"{tool}({', '.join(f'{k}={v}' for k, v in a.items())})" for tool, a in tools["arguments"].items()]
            arguments = _listed(globs)
            lines.append(f"    mcp on {entry['host']}:")
            lines.append(f"      tools allow {_listed(tools['allow'])}; deny {_listed(tools['deny'])}")
            lines.append(f"      arguments {arguments}")
            lines.append(f"      resources {_listed(entry['resources'])}; prompts allow {_listed(prompts['allow'])}")
    return lines


def approval_lines(requests: list[dict[str, Any]], now: datetime) -> list[str]:
    """``broker approvals``: each open request with what it would mint, who may approve, and its digest."""
    if not requests:
        return ["no approval requests waiting"]
    from broker.vocab.time import parse_iso

    lines: list[str] = []
    for item in requests:
        uid = f" (uid {item['requester_uid']})" if item.get("requester_uid") is not None else ""
        state = "approved, not collected" if item["state"] == "granted" else item["state"]
        lines.append(
            f"request {item['request']}  task {item['task']}  requester {item['requester']}{uid}"
            f"  {state}, expires {time_left(parse_iso(item['expires_at']), now)}"
        )
        lines.append(f"  approvers: {' and '.join(' or '.join(group) for group in item['approvers'])}")
        lines += _approval_summary(item.get("summary") or {})
        lines.append(f"  digest: {item['digest']}")
    return lines


def _approval_summary(summary: dict[str, Any]) -> list[str]:
    """What the request would mint: each credential as asked, with its rule and capped TTL, and the network."""
    manifest = summary.get("manifest") or {}
    document = manifest.get("document") or {}
    decision = summary.get("decision") or {}
    decided = {c.get("name"): c for c in decision.get("credentials") or [] if isinstance(c, dict)}
    sandbox = manifest.get("sandbox") or {}
    session_ttl = decision.get("session_ttl")
    ttl = format_duration(session_ttl) if isinstance(session_ttl, int) else "?"
    lines = [f"  session ttl {ttl}, sandbox uid/gid {sandbox.get('uid')}/{sandbox.get('gid')}"]
    for credential in document.get("credentials") or []:
        if not isinstance(credential, dict):
            continue
        name = credential.get("name")
        verdict = decided.get(name) or {}
        asked = {k: v for k, v in credential.items() if k not in ("name", "provider")}
        credential_ttl = verdict.get("ttl")
        shown_ttl = format_duration(credential_ttl) if isinstance(credential_ttl, int) else "?"
        lines.append(
            f"  {name}: {credential.get('provider')} by rule {verdict.get('rule')}, ttl {shown_ttl}:"
            f" {json.dumps(asked, sort_keys=True, default=str)}"
        )
    network = (document.get("network") or {}).get("allow") if isinstance(document.get("network"), dict) else None
    if network:
        lines.append(f"  network: {', '.join(str(entry) for entry in network)}")
    return lines


def decided_line(item: dict[str, Any], action: str) -> str:
    """``broker approve`` / ``broker deny``: what was decided."""
    if action == "approve":
        return (
            f"approved request {item['request']} (task {item['task']}, requester {item['requester']});"
            f" its session can be collected until {item['expires_at']}"
        )
    because = f": {item['reason']}" if item.get("reason") else ""
    return f"denied request {item['request']} (task {item['task']}, requester {item['requester']}){because}"


def waiting_line(message: str, wait: float | None) -> str:
    """What a waiting ``issue`` says on stderr while it waits for the decision."""
    limit = "until the request expires" if wait is None else f"up to {format_duration(max(int(wait), 0))}"
    return f"broker: {message}; waiting {limit} (interrupting leaves it pending)"


# -- the renderers the command table names: (document, the command's values) -> printed -------------------------


def show(value: object) -> None:
    """One piece of output on stdout, flushed now: text as it is, anything else as indented JSON."""
    text = value if isinstance(value, str) else json.dumps(value, indent=2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _lines(values: Mapping[str, object], document: object, lines: list[str]) -> None:
    show(document if values.get("as_json") else "\n".join(lines))


def revoked(document: Any, values: Mapping[str, object]) -> None:
    """``broker revoke``: one report (``--session``) or a list (``--task``)."""
    _lines(values, document, revoke_lines(document if isinstance(document, list) else [document]))


def status(document: Any, values: Mapping[str, object]) -> None:
    """``broker status``: the sessions as a table, or JSON (with ``--all``, ended ones too); the table's library
    (rich) is loaded only when there is a table to print."""
    if values.get("as_json"):
        show(document)
    elif not document:
        show("no live sessions" if not values.get("show_all") else "no sessions")
    else:
        from broker.cli.output import print_table
        from broker.vocab.time import utcnow

        print_table(STATUS_COLUMNS, status_rows(document, utcnow()))


def renewed(document: Any, values: Mapping[str, object]) -> None:
    _lines(values, document, renew_lines(document))


def network(document: Any, values: Mapping[str, object]) -> None:
    _lines(values, document, network_lines(document))


def decision(document: Any, values: Mapping[str, object]) -> None:
    """``broker policy check``: the decision, allowed or denied."""
    _lines(values, document, decision_lines(document))


def approvals(document: Any, values: Mapping[str, object]) -> None:
    from broker.vocab.time import utcnow

    _lines(values, document, approval_lines(document, utcnow()))


def approved(document: Any, values: Mapping[str, object]) -> None:
    _lines(values, document, [decided_line(document, "approve")])


def denied(document: Any, values: Mapping[str, object]) -> None:
    _lines(values, document, [decided_line(document, "deny")])


def published(document: Any, values: Mapping[str, object]) -> None:
    """``broker identity jwks|discovery|revoked``: the document as the issuer publishes it."""
    show(document)


def exec_ended(document: Any, values: Mapping[str, object]) -> None:
    """``broker exec`` prints nothing of its own but each limit the command went past (``notes``) and how its
    session's revocation ended, when it did not end well (``revoked``: True, False for incomplete, None when the
    daemon went away first)."""
    for note in document.get("notes") or ():
        sys.stderr.write(f"broker: {note}\n")
    session, revoked = document["session"], document["revoked"]
    if revoked is None:
        message = f"session {session}: the broker daemon went away; broker sweep revokes it"
    elif not revoked:
        message = f"session {session}: revocation incomplete; pending credentials stay for broker sweep"
    else:
        return
    sys.stderr.write(f"broker: error: {message}\n")
    sys.stderr.flush()
