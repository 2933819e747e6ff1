"""The MCP figures: what the tool-call check adds through the proxy, and what filtering a 200-tool list costs.

- The check's added latency: two proxies in child processes
  (``bench.proxy.proxychild.ProxyChild``), both terminating the upstream's
  host (a bearer token swapped in) and logging every request, one with the
  README's ``operations.mcp`` and one without; a ``tools/call`` of 4 KiB
  (``create_pull_request``, its body argument padded; allowed, so it goes
  upstream) alternates between them on kept tunnels, the order rotating.
  The figure is the difference of the medians (goal < 1 ms).
- The list filter alone, in process: a ``tools/list`` answer of 200
  GitHub-shaped tools (each with its input schema, about 100 KiB) through
  the ``AnswerRewrite`` the check hands the relay (head, the body in 64 KiB
  pieces, end), as JSON and as one SSE event; half the tools go. The median
  per answer (goal < 2 ms).

Run alone: ``python -m bench.proxy.mcp [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import WORK, Report, Row, Settings, median, summary
from bench.proxy.proxychild import ProxyChild, tunnel, upstream
from broker.egress.operations import read_operations
from broker.egress.operations.mcp.answers import list_answers
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields

ENTRY = {
    "tools": {
        "allow": ["get_*", "list_*", "search_*", "create_pull_request"],
        "deny": ["merge_*", "delete_*"],
        "arguments": {"create_pull_request": {"owner": "octo-org", "base": "agent/*"}},
    },
    "resources": ["repo://octo-org/*"],
    "prompts": False,
}
RULE = {"mcp": {"127.0.0.1:{port}": ENTRY}}
VERBS = ("get", "list", "search", "merge", "delete", "update", "create", "fork")


def tool_call(size: int) -> bytes:
    """A ``create_pull_request`` call of ``size`` bytes, within the rule's argument globs."""
    arguments: dict[str, str] = {"owner": "octo-org", "repo": "widgets", "title": "Fix", "head": "agent/fix"}
    arguments |= {"base": "agent/x", "body": ""}
    call = {"jsonrpc": "2.0", "id": 42, "method": "tools/call", "params": {"name": "create_pull_request"}}
    call["params"] = {"name": "create_pull_request", "arguments": arguments}
    arguments["body"] = "x" * (size - len(json.dumps(call, separators=(",", ":"))))
    data = json.dumps(call, separators=(",", ":")).encode()
    assert len(data) == size
    return data


def post(connection: http.client.HTTPSConnection, body: bytes) -> float:
    headers = {
        "Authorization": "token ghs_" + "p" * 36,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "create_pull_request",
    }
    start = time.perf_counter()
    connection.request("POST", "/mcp", body=body, headers=headers)
    response = connection.getresponse()
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status == 200, response.status
    return elapsed * 1000


def check_latency(work: Path, requests: int) -> dict[str, Any]:
    up = upstream(work)
    with_ops = ProxyChild(work / "with", up.child.port, up.ca_file, operations=RULE)
    without = ProxyChild(work / "without", up.child.port, up.ca_file, operations=None)
    body = tool_call(4096)
    try:
        sides = {
            "terminated": tunnel(without, up.child.port, without.ca_file),
            "mcp": tunnel(with_ops, up.child.port, with_ops.ca_file),
        }
        samples: dict[str, list[float]] = {side: [] for side in sides}
        for number in range(requests + 50):
            order = list(sides) if number % 2 else list(reversed(sides))
            for side in order:
                elapsed = post(sides[side], body)
                if number >= 50:
                    samples[side].append(elapsed)
        for connection in sides.values():
            connection.close()
    finally:
        for child in (with_ops, without):
            child.close()
        up.child.close()
    medians = {side: statistics.median(values) for side, values in samples.items()}
    return {"medians_ms": medians, "added_ms": medians["mcp"] - medians["terminated"], "n": requests}


def tools_answer(count: int) -> dict[str, Any]:
    tools = []
    for number in range(count):
        name = f"{VERBS[number % len(VERBS)]}_thing_{number}"
        properties = {
            key: {"type": "string", "description": f"The {key} of the {name} call, as GitHub names it."}
            for key in ("owner", "repo", "ref", "path")
        }
        schema = {"type": "object", "properties": properties, "required": ["owner", "repo"]}
        tools.append({"name": name, "description": f"{name}: does one thing to a repository.", "inputSchema": schema})
    return {"jsonrpc": "2.0", "id": 3, "result": {"tools": tools}}


SECTION = read_operations(Fields({"mcp": {"mcp.example.com:443": ENTRY}}, "operations", PolicyFileError)).mcp[0]


def filter_once(data: bytes, head: list[tuple[bytes, bytes]]) -> int:
    """One list answer through the rewrite the check makes for a POST holding one tools/list (the check's
    decision is the tool-call figure's; the rewrite is what the answer adds)."""
    rewrite = list_answers(SECTION, {3: "tools/list"})
    rewrite.head(200, head)
    out = bytearray()
    for at in range(0, len(data), 64 * 1024):
        out += rewrite.feed(data[at : at + 64 * 1024])
    out += rewrite.end()
    return len(out)


def list_filter(rounds: int) -> dict[str, Any]:
    document = json.dumps(tools_answer(200), separators=(",", ":")).encode()
    cases = {
        "JSON": (document, [(b"content-type", b"application/json")]),
        "SSE": (b"event: message\r\ndata: " + document + b"\r\n\r\n", [(b"content-type", b"text/event-stream")]),
    }
    kept = {name: filter_once(*case) for name, case in cases.items()}
    samples: dict[str, list[float]] = {name: [] for name in cases}
    gc.disable()
    try:
        for number in range(rounds):
            for name in list(cases) if number % 2 else list(reversed(cases)):
                start = time.perf_counter()
                filter_once(*cases[name])
                samples[name].append((time.perf_counter() - start) * 1000)
    finally:
        gc.enable()
    return {"bytes": len(document), "kept_bytes": kept, "samples": samples}


def add_rows(latency: dict[str, Any], lists: dict[str, Any], report: Report) -> None:
    added = latency["added_ms"]
    medians = latency["medians_ms"]
    report.add(
        Row(
            "mcp",
            "mcp: the tool-call check's added latency, a 4 KiB tools/call through the proxy (median)",
            round(added, 3),
            "ms",
            "< 1 ms",
            added < 1,
            f"({medians['mcp']:.2f} vs {medians['terminated']:.2f} ms with and without operations.mcp, both"
            f" terminating and logging, {latency['n']} alternating requests each)",
            {"medians_ms": medians},
        )
    )
    for name, values in lists["samples"].items():
        value = median(values)
        report.add(
            Row(
                "mcp",
                f"mcp: a tools/list answer of 200 tools filtered ({name}, {lists['bytes'] // 1024} KiB, median)",
                round(value, 3),
                "ms",
                "< 2 ms",
                value < 2,
                f"in process, the relay's rewrite alone; {lists['kept_bytes'][name] // 1024} KiB kept"
                f" (min {min(values):.3f}, max {max(values):.3f} ms)",
                summary(values),
            )
        )


def measure(work: Path, *, quick: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    latency = check_latency(work / "latency", 200 if quick else 1000)
    return latency, list_filter(31 if quick else 201)


def figure_mcp(settings: Settings, report: Report) -> None:
    work = Path(tempfile.mkdtemp(prefix="mcp-", dir=WORK if WORK.exists() else None))
    add_rows(*measure(work, quick=settings.quick), report)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.mcp", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    add_rows(*measure(Path(tempfile.mkdtemp(prefix="mcp-")), quick=args.quick), Report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
