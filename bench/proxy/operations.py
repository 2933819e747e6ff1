"""The operations figure: what deciding one request costs the proxy (in process, the median per request).

One ``OperationsChecker`` for the SPEC's example rule (plus a few routes),
and for each kind of request the whole decision the proxy will make: the
head, and for a request whose body decides, the body fed in one piece (a
push: its command list followed by 64 KiB of pack; GraphQL: what ``gh pr
list`` sends; a review: a short JSON object). Cases run in batches, in a
shuffled order each round; a batch's time over its size is one sample and
the figure is the median sample. No network: the proxy's own cost around
the decision is the egress figure's.

Run alone: ``python -m bench.proxy.operations [--quick]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import random
import sys
import time
from collections.abc import Callable

from bench.common import Report, Row, Settings, median, summary
from broker.egress.operations import Decision, read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields

RULE = {
    "git": {"hosts": ["github.com:443"], "push": ["refs/heads/agent/*"]},
    "github_api": {
        "hosts": ["api.github.com:443"],
        "allow": [
            "GET *",
            "POST /repos/*/*/pulls",
            "PATCH /repos/*/*/pulls/*",
            "POST /repos/*/*/issues/*/comments",
            "POST /repos/*/*/pulls/*/reviews",
            "POST /repos/*/*/pulls/*/reviews/*/events",
        ],
        "deny": ["PUT /repos/*/*/pulls/*/merge", "GET /repos/*/*/actions/secrets", "GET /repos/*/*/actions/secrets/*"],
        "graphql_mutations": ["addComment", "createPullRequest"],
    },
    "http": {"pypi.org:443": {"methods": ["GET", "HEAD"], "paths": ["/simple/*", "/packages/*"]}},
}
GH_PR_LIST = (
    "query PullRequestList($owner: String!, $repo: String!, $limit: Int!, $endCursor: String, $state: "
    "[PullRequestState!] = OPEN) { repository(owner: $owner, name: $repo) { pullRequests(states: $state, first: "
    "$limit, after: $endCursor, orderBy: {field: CREATED_AT, direction: DESC}) { totalCount nodes { ...pr } "
    "pageInfo { hasNextPage endCursor } } } } fragment pr on PullRequest { number title state url isDraft "
    "createdAt headRefName author { login ... on User { id name } } labels(first: 100) { nodes { id name color } } }"
)
MUTATION = 'mutation AddComment { addComment(input: {subjectId: "PR_kwDO", body: "done"}) { clientMutationId } }'
ZERO, ONE, TWO = "0" * 40, "1" * 40, "2" * 40


def pkt(text: str) -> bytes:
    data = text.encode()
    return b"%04x" % (len(data) + 4) + data


def push_body(refs: int) -> bytes:
    caps = "\0 report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.39.5"
    lines = [pkt(f"{ONE} {TWO} refs/heads/agent/task-{i}" + (caps if i == 0 else "\n")) for i in range(refs)]
    return b"".join(lines) + b"0000PACK" + bytes(64 * 1024)


CASES: dict[str, tuple[str, str, str, bytes]] = {
    "REST GET, allowed": ("api.github.com", "GET", "/repos/octo/widgets/pulls?state=open&per_page=30", b""),
    "REST PUT merge, denied": ("api.github.com", "PUT", "/repos/octo/widgets/pulls/7/merge", b""),
    "REST GET with %2F, two readings": ("api.github.com", "GET", "/repos/octo/widgets/branches/agent%2Fx", b""),
    "review COMMENT (JSON body)": (
        "api.github.com",
        "POST",
        "/repos/octo/widgets/pulls/7/reviews",
        json.dumps({"body": "Looks fine, two nits inline.", "event": "COMMENT"}).encode(),
    ),
    "GraphQL query (gh pr list)": (
        "api.github.com",
        "POST",
        "/graphql",
        json.dumps({"query": GH_PR_LIST, "variables": {"owner": "octo", "repo": "widgets", "limit": 30}}).encode(),
    ),
    "GraphQL mutation, listed": ("api.github.com", "POST", "/graphql", json.dumps({"query": MUTATION}).encode()),
    "git fetch (upload-pack)": ("github.com", "POST", "/octo/widgets.git/git-upload-pack", b""),
    "git push, 1 ref": ("github.com", "POST", "/octo/widgets.git/git-receive-pack", push_body(1)),
    "git push, 100 refs": ("github.com", "POST", "/octo/widgets.git/git-receive-pack", push_body(100)),
    "http GET (pypi)": ("pypi.org", "GET", "/simple/requests/", b""),
}
HEADERS = [(b"host", b"api.github.com"), (b"user-agent", b"GitHub CLI 2.46.0"), (b"accept", b"application/json")]


def decide(checker: OperationsChecker, host: str, method: str, target: str, body: bytes) -> Decision:
    step = checker.check(host, 443, method.encode(), target.encode(), HEADERS)
    if isinstance(step, Decision):
        return step
    return step.feed(body) or step.end()


def measure(batches: int, batch: int) -> dict[str, list[float]]:
    """Seconds per decision, one sample per batch, for every case."""
    checker = OperationsChecker(read_operations(Fields(RULE, "operations", PolicyFileError)), "dev-agents")
    calls: dict[str, Callable[[], Decision]] = {
        name: functools.partial(decide, checker, *case) for name, case in CASES.items()
    }
    for call in calls.values():  # warm up, and check the cases decide as their names say
        call()
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    gc.disable()
    try:
        for _ in range(batches):
            random.shuffle(names)
            for name in names:
                call = calls[name]
                start = time.perf_counter()
                for _ in range(batch):
                    call()
                samples[name].append((time.perf_counter() - start) / batch)
    finally:
        gc.enable()
    return samples


def add_rows(samples: dict[str, list[float]], report: Report) -> None:
    worst = 0.0
    for name, values in samples.items():
        value = median(values) * 1e6
        worst = max(worst, value)
        report.add(Row("operations", f"operations: {name}", round(value, 1), "us", "", None, "", summary(values)))
    report.add(
        Row(
            "operations",
            "operations: the costliest decision (median)",
            round(worst, 1),
            "us",
            "< 1000 us",
            worst < 1000,
            "the decision alone, in process; the issue's 1 ms goal is through the proxy",
        )
    )


def figure_operations(settings: Settings, report: Report) -> None:
    add_rows(measure(7 if settings.quick else 31, 50 if settings.quick else 200), report)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.proxy.operations", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    add_rows(measure(7 if args.quick else 31, 50 if args.quick else 200), Report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
