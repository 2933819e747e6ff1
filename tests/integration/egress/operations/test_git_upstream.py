"""Real git against a real smart-HTTP upstream (``git http-backend`` behind TLS on loopback), and the push check.

The push bodies are the ones the real git client sent, captured by the
upstream; the refusals are answered by the broker's own report, which the real
git client prints.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.egress.operations import Decision, read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.egress.operations.git import ReceivePackCheck
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from devstack.git_http import Recorded, Reply
from tests.fixtures.git_http import GitUpstream, git_upstream

__all__ = ["git_upstream"]

RULE = "dev-agents"


def checker_for(upstream: GitUpstream, *, delete: bool = False) -> OperationsChecker:
    host = f"127.0.0.1:{upstream.server.port}"
    document = {"git": {"hosts": [host], "push": ["refs/heads/agent/*"], "delete": delete}}
    return OperationsChecker(read_operations(Fields(document, "operations", PolicyFileError)), RULE)


def decide(checker: OperationsChecker, port: int, request: Recorded, pieces: int = 1) -> Decision:
    """The checker's decision on a recorded request, its body fed in ``pieces`` parts."""
    step = checker.check("127.0.0.1", port, request.method, request.target, request.headers)
    if isinstance(step, Decision):
        return step
    size = max(1, -(-len(request.body) // pieces))
    for at in range(0, len(request.body), size):
        decision = step.feed(request.body[at : at + size])
        if decision is not None:
            return decision
    return step.end()


def work_tree(upstream: GitUpstream, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    upstream.client("clone", "--quiet", upstream.url, str(work))
    (work / "change.txt").write_text("a change\n")
    upstream.client("add", "change.txt", cwd=work)
    upstream.client("commit", "--quiet", "-m", "a change", cwd=work)
    return work


def test_real_git_clones_and_pushes_over_https(git_upstream: GitUpstream, tmp_path: Path) -> None:
    work = work_tree(git_upstream, tmp_path)
    head = git_upstream.client("rev-parse", "HEAD", cwd=work).stdout.strip()
    git_upstream.client("push", "origin", "HEAD:refs/heads/agent/x", cwd=work)
    assert git_upstream.ref("refs/heads/agent/x") == head
    again = tmp_path / "again"
    git_upstream.client("clone", "--quiet", "--branch", "agent/x", git_upstream.url, str(again))
    assert (again / "change.txt").read_text() == "a change\n"
    assert [r.target for r in git_upstream.server.pushes()] == ["/octo/widgets.git/git-receive-pack"]


def test_the_push_bodies_git_sends_go_through_the_receive_pack_parser(
    git_upstream: GitUpstream, tmp_path: Path
) -> None:
    work = work_tree(git_upstream, tmp_path)
    git_upstream.client("push", "origin", "HEAD:refs/heads/agent/x", cwd=work)
    git_upstream.client("push", "origin", "HEAD:refs/heads/main", cwd=work)
    (work / "more.txt").write_text("more\n")
    git_upstream.client("add", "more.txt", cwd=work)
    git_upstream.client("commit", "--quiet", "-m", "more", cwd=work)
    git_upstream.client("push", "origin", "HEAD:refs/heads/agent/y", "HEAD:refs/heads/main", cwd=work)
    git_upstream.client("push", "origin", "--delete", "agent/x", cwd=work)
    allowed_ref, main, two_refs, deletion = git_upstream.server.pushes()
    port = git_upstream.server.port
    narrow, deleting = checker_for(git_upstream), checker_for(git_upstream, delete=True)

    for pieces in (1, 3, len(allowed_ref.body)):
        decision = decide(narrow, port, allowed_ref, pieces)
        assert decision.allowed, decision
    assert decision.reason == "a push of refs/heads/agent/x"

    refused = decide(narrow, port, main)
    assert not refused.allowed
    assert refused.reason == "push refused as a whole: refs/heads/main is outside push"

    both = decide(narrow, port, two_refs, pieces=7)
    assert not both.allowed and "refs/heads/main is outside push" in both.reason
    assert both.answer is not None
    assert (
        b"ng refs/heads/agent/y refused by policy dev-agents (another ref of this push is refused)" in both.answer.body
    )
    assert b"ng refs/heads/main refused by policy dev-agents\n" in both.answer.body

    assert deletion.body.endswith(b"0000")  # a deletion sends no pack
    assert not decide(narrow, port, deletion).allowed
    assert decide(deleting, port, deletion).allowed


def test_the_push_check_decides_on_the_command_list_without_the_pack(git_upstream: GitUpstream, tmp_path: Path) -> None:
    work = work_tree(git_upstream, tmp_path)
    git_upstream.client("push", "origin", "HEAD:refs/heads/agent/x", cwd=work)
    (push,) = git_upstream.server.pushes()
    pack_at = push.body.index(b"PACK")
    check = ReceivePackCheck(checker_for(git_upstream).operations.git[0], RULE)
    assert check.feed(push.body[: pack_at - 4]) is None  # the flush has not arrived
    decision = check.feed(push.body[pack_at - 4 : pack_at])
    assert decision is not None and decision.allowed
    assert check.push is not None and check.push.size == pack_at


def gated(upstream: GitUpstream, checker: OperationsChecker) -> None:
    """Put ``checker`` in front of the upstream's backend, answering refusals with the checker's own answer."""

    def gate(request: Recorded) -> Reply | None:
        decision = decide(checker, upstream.server.port, request)
        if decision.allowed:
            return None
        assert decision.answer is not None
        answer = decision.answer
        return Reply(answer.status, tuple((k.decode(), v.decode()) for k, v in answer.headers()), answer.body)

    upstream.server.gate = gate


@pytest.mark.parametrize("quiet", [False, True])
def test_git_prints_the_refusal_and_the_upstream_is_untouched(
    git_upstream: GitUpstream, tmp_path: Path, quiet: bool
) -> None:
    work = work_tree(git_upstream, tmp_path)
    gated(git_upstream, checker_for(git_upstream))
    main_before = git_upstream.ref("refs/heads/main")
    flags = ["--quiet"] if quiet else []

    git_upstream.client("push", *flags, "origin", "HEAD:refs/heads/agent/x", cwd=work)  # allowed: reaches the backend
    assert git_upstream.ref("refs/heads/agent/x") == git_upstream.client("rev-parse", "HEAD", cwd=work).stdout.strip()

    done = git_upstream.client("push", *flags, "origin", "HEAD:refs/heads/main", cwd=work, check=False)
    assert done.returncode == 1
    assert "! [remote rejected] HEAD -> main (refused by policy dev-agents)" in done.stderr
    assert (
        "remote: refused by policy dev-agents: push refused as a whole: refs/heads/main is outside push" in done.stderr
    )
    assert "error: failed to push some refs" in done.stderr

    done = git_upstream.client(
        "push", *flags, "origin", "HEAD:refs/heads/agent/y", "HEAD:refs/heads/main", cwd=work, check=False
    )
    assert done.returncode == 1
    assert "! [remote rejected] HEAD -> agent/y (refused by policy dev-agents (another ref" in done.stderr
    assert "! [remote rejected] HEAD -> main (refused by policy dev-agents)" in done.stderr

    done = git_upstream.client("push", *flags, "origin", "--delete", "agent/x", cwd=work, check=False)
    assert done.returncode == 1
    assert "! [remote rejected] agent/x (refused by policy dev-agents (deleting a ref is not allowed))" in done.stderr

    assert git_upstream.ref("refs/heads/main") == main_before
    assert git_upstream.ref("refs/heads/agent/y") is None
    assert git_upstream.ref("refs/heads/agent/x") is not None
    git_upstream.client("fetch", "--quiet", "origin", cwd=work)  # fetches pass
