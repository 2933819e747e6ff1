"""Operations through the session's proxy, in process: real git, curl and gh against upstreams that record.

The proxy terminates TLS for every host the operations limit, checks each
request before anything goes upstream and appends one ``egress.request``
record per request (``tests/fixtures/operations_stage.py``). What reached an
upstream is what the upstream recorded; what the client saw is what it
printed. ``tests/integration/egress/operations/test_exec.py`` runs the same clients from
inside ``broker exec --network allowlist`` and through the daemon.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from broker.egress.injectors.swap import Injection
from broker.egress.terminate.ca import SessionCA
from broker.vocab.secret import Secret
from devstack.git_http import git_env
from providers.placeholders import placeholder_for
from tests.fixtures.operations_stage import API, GIT, INDEX, PLAIN, RULE, Stage, stage

__all__ = ["stage"]

MERGE = "/api/v3/repos/octo/widgets/pulls/7/merge"


def work_tree(stage: Stage) -> Path:
    work = stage.tmp / "work"
    cloned = stage.git_client("clone", "--quiet", stage.url(GIT, "/octo/widgets.git"), str(work))
    assert cloned.returncode == 0, cloned.stderr
    (work / "change.txt").write_text("a change\n")
    for step in (("add", "change.txt"), ("commit", "--quiet", "-m", "a change")):
        assert stage.git_client(*step, cwd=work).returncode == 0
    return work


def test_real_git_clones_and_pushes_only_to_the_refs_the_rule_allows(stage: Stage) -> None:
    work = work_tree(stage)
    head = stage.git_client("rev-parse", "HEAD", cwd=work).stdout.strip()
    main_before = stage.ref("refs/heads/main")

    allowed = stage.git_client("push", "origin", "HEAD:refs/heads/agent/x", cwd=work)
    assert allowed.returncode == 0, allowed.stderr
    assert stage.ref("refs/heads/agent/x") == head

    to_main = stage.git_client("push", "origin", "HEAD:refs/heads/main", cwd=work)
    assert to_main.returncode == 1
    assert f"! [remote rejected] HEAD -> main (refused by policy {RULE})" in to_main.stderr
    assert f"remote: refused by policy {RULE}: push refused as a whole: refs/heads/main is outside push" in (
        to_main.stderr
    )

    both = stage.git_client("push", "origin", "HEAD:refs/heads/agent/y", "HEAD:refs/heads/main", cwd=work)
    assert both.returncode == 1
    assert f"! [remote rejected] HEAD -> main (refused by policy {RULE})" in both.stderr
    assert "! [remote rejected] HEAD -> agent/y (refused by policy" in both.stderr

    deletion = stage.git_client("push", "origin", "--delete", "agent/x", cwd=work)
    assert deletion.returncode == 1
    assert "! [remote rejected] agent/x (refused by policy" in deletion.stderr

    # Nothing refused reached the upstream: one push went through, main and agent/y are untouched.
    assert len(stage.git.pushes()) == 1
    assert stage.ref("refs/heads/main") == main_before
    assert stage.ref("refs/heads/agent/y") is None
    assert stage.ref("refs/heads/agent/x") == head

    records = stage.records(11)  # a clone's 3 requests, then 4 pushes of 2 (the advertisement and the push)
    pushes = [r for r in records if r["path"].endswith("/git-receive-pack")]
    assert [(r["decision"], r["status"], r["upstream_status"]) for r in pushes] == [
        ("allowed", 200, 200),
        ("refused", 200, None),
        ("refused", 200, None),
        ("refused", 200, None),
    ]
    assert {r["rule"] for r in pushes} == {RULE} and {r["operations"] for r in pushes} == {"git"}
    assert pushes[1]["reason"] == "push refused as a whole: refs/heads/main is outside push"
    assert "deleting refs/heads/agent/x is not allowed" in pushes[3]["reason"]
    assert all(r["host"] == f"{GIT}:{stage.ports[GIT]}" and r["credential"] is None for r in pushes)
    fetches = [r for r in records if r["path"].endswith("/git-upload-pack")]
    assert fetches and all(r["decision"] == "allowed" and r["reason"] == "a fetch" for r in fetches)
    assert stage.verify().records == len(stage.log.path.read_text().splitlines())


def test_curl_merge_is_refused_with_github_s_error_and_reads_pass(stage: Stage) -> None:
    merged = stage.run("curl", "-sS", "-X", "PUT", "-w", "\n%{http_code}", stage.url(API, MERGE))
    body, _, status = merged.stdout.rpartition("\n")
    assert status == "403", merged.stderr
    answer = json.loads(body)
    assert (
        answer["message"] == f"refused by policy {RULE}: PUT {MERGE} matches deny PUT /api/v3/repos/*/*/pulls/*/merge"
    )
    assert answer["status"] == "403" and answer["documentation_url"].endswith("#operations-not-just-hosts")
    listed = stage.run("curl", "-sS", "-f", stage.url(API, "/api/v3/repos/octo/widgets/pulls?state=open"))
    assert listed.returncode == 0, listed.stderr
    assert stage.api.requests() == [("GET", "/api/v3/repos/octo/widgets/pulls?state=open")]  # the merge never went
    merge, pulls = stage.records(2)
    assert (merge["decision"], merge["status"], merge["upstream_status"], merge["method"]) == (
        "refused",
        403,
        None,
        "PUT",
    )
    assert (pulls["decision"], pulls["status"], pulls["upstream_status"]) == ("allowed", 200, 200)
    assert pulls["path"] == "/api/v3/repos/octo/widgets/pulls"  # the query string is never recorded
    assert pulls["answer_bytes"] > 0 and pulls["request_bytes"] == 0


@pytest.mark.skipif(shutil.which("gh") is None, reason="gh is not installed (apt-get install gh)")
def test_gh_api_merge_approve_and_unlisted_mutations_are_refused_and_the_rest_passes(stage: Stage) -> None:
    gh = {"GH_HOST": f"{API}:{stage.ports[API]}", "GH_ENTERPRISE_TOKEN": "ghs_" + "x" * 36}

    def call(*args: str) -> tuple[int, str]:
        done = stage.run("gh", "api", *args, extra=gh)
        return done.returncode, done.stdout + done.stderr

    code, out = call("-X", "PUT", "repos/octo/widgets/pulls/7/merge")
    assert code != 0 and f"refused by policy {RULE}" in out and "HTTP 403" in out, out
    code, out = call("-X", "POST", "repos/octo/widgets/pulls/7/reviews", "-f", "event=APPROVE")
    assert code != 0 and "a review with event APPROVE: reviews.approve is false" in out, out
    mutation = 'mutation { mergePullRequest(input: {pullRequestId: "PR_1"}) { clientMutationId } }'
    code, out = call("graphql", "-f", f"query={mutation}")
    assert code != 0 and "mergePullRequest" in out and f"refused by policy {RULE}" in out, out

    code, out = call("repos/octo/widgets/pulls")
    assert code == 0, out
    code, out = call("-X", "POST", "repos/octo/widgets/pulls/7/reviews", "-f", "event=COMMENT", "-f", "body=two nits")
    assert code == 0 and json.loads(out)["state"] == "COMMENT", out
    code, out = call("graphql", "-f", "query=query { viewer { login } }")
    assert code == 0 and json.loads(out)["data"]["viewer"]["login"] == "octo", out
    comment = 'mutation { addComment(input: {subjectId: "PR_1", body: "done"}) { clientMutationId } }'
    code, out = call("graphql", "-f", f"query={comment}")
    assert code == 0, out

    assert stage.api.requests() == [
        ("GET", "/api/v3/repos/octo/widgets/pulls"),
        ("POST", "/api/v3/repos/octo/widgets/pulls/7/reviews"),
        ("POST", "/api/graphql"),
        ("POST", "/api/graphql"),
    ]
    records = stage.records(7)
    assert [r["decision"] for r in records] == ["refused"] * 3 + ["allowed"] * 4
    assert all(r["operations"] == "github_api" and r["rule"] == RULE for r in records)
    assert stage.api.connections < len(stage.api.seen) + 1  # gh's calls share kept connections upstream


def test_a_body_decision_answers_expect_100_continue_and_the_connection_stays_usable(stage: Stage) -> None:
    review = stage.url(API, "/api/v3/repos/octo/widgets/pulls/7/reviews")
    approve = json.dumps({"event": "APPROVE", "body": "x" * 2000})
    comment = json.dumps({"event": "COMMENT", "body": "fine"})
    done = stage.run(
        "curl", "-sS", "-w", "\n%{http_code}\n", "-H", "Expect: 100-continue", "-H", "Content-Type: application/json",
        "--data-binary", approve, review, "--next",
        "-sS", "-w", "\n%{http_code}\n", "-H", "Expect: 100-continue", "-H", "Content-Type: application/json",
        "--data-binary", comment, review, "-v",
    )  # fmt: skip
    statuses = [line for line in done.stdout.splitlines() if line in ("201", "403")]
    assert statuses == ["403", "201"], done.stdout + done.stderr
    assert done.stderr.count("< HTTP/1.1 100 Continue") == 2  # each body decides: each got its 100 first
    assert done.stderr.count("Re-using existing connection") == 1  # the refusal kept the tunnel
    assert [json.loads(s.body)["event"] for s in stage.api.seen] == ["COMMENT"]
    refused, allowed = stage.records(2)
    assert refused["body_complete"] and refused["request_bytes"] == len(approve)
    assert allowed["decision"] == "allowed" and allowed["request_bytes"] == len(comment)


def test_http_read_only_hosts_pass_reads_and_refuse_writes_over_tls_and_plain_http(stage: Stage) -> None:
    for host in (INDEX, PLAIN):
        read = stage.run("curl", "-sS", "-f", stage.url(host, "/simple/requests/"))
        assert read.returncode == 0, read.stderr
        write = stage.run("curl", "-sS", "-w", "\n%{http_code}", "-X", "POST", "-d", "x=1", stage.url(host, "/upload"))
        body, _, status = write.stdout.rpartition("\n")
        assert status == "403", write.stderr
        assert (
            body.rstrip("\n")
            == f"refused by policy {RULE}: POST is not among the methods for {host}:{stage.ports[host]}"
        )
    assert stage.index.requests() == [("GET", "/simple/requests/")]
    assert stage.plain.requests() == [("GET", "/simple/requests/")]
    records = stage.records(4)
    assert [(r["host"].split(":")[0], r["method"], r["decision"]) for r in records] == [
        (INDEX, "GET", "allowed"),
        (INDEX, "POST", "refused"),
        (PLAIN, "GET", "allowed"),
        (PLAIN, "POST", "refused"),
    ]
    assert {r["operations"] for r in records} == {"http"}


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "ghe.test", "files.pythonhosted.test"])
def test_the_session_ca_serves_addresses_names_and_wildcard_hosts_side_by_side(tmp_path: Path, host: str) -> None:
    """Operations hosts mix addresses, names and ``*.`` suffixes in one name-constrained CA; each leaf verifies.
    (An address's leaf once carried the address as its common name, which OpenSSL checks against the DNS
    constraints as soon as there is one: a "permitted subtree violation".)"""
    ca = SessionCA(["127.0.0.1", "::1", "ghe.test", "*.pythonhosted.test"], datetime.now(UTC) + timedelta(minutes=5))
    cafile = tmp_path / "ca.pem"
    cafile.write_bytes(ca.pem)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server(("::1" if ":" in host else "127.0.0.1", 0), family=family)
    server = ca.server_context(host)

    def serve() -> None:
        connection, _ = listener.accept()
        with contextlib.suppress(OSError):
            server.wrap_socket(connection, server_side=True).close()

    threading.Thread(target=serve, daemon=True).start()
    client = ssl.create_default_context(cafile=str(cafile))
    raw = socket.create_connection(listener.getsockname()[:2], timeout=10)
    with client.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.version() is not None
    listener.close()
    with pytest.raises(ValueError, match="not a host of this session CA"):
        ca.server_context("pythonhosted.test")  # the suffix itself is not under *.pythonhosted.test


def test_git_s_gnutls_takes_an_address_leaf_beside_a_name_constraint(tmp_path: Path) -> None:
    """git's libcurl here is built on GnuTLS, which checks any common name of a certificate without a DNS
    subjectAltName against the DNS constraints: an address's leaf has no common name at all."""
    ca = SessionCA(["127.0.0.1", "ghe.test"], datetime.now(UTC) + timedelta(minutes=5))
    cafile = tmp_path / "ca.pem"
    cafile.write_bytes(ca.pem)
    listener = socket.create_server(("127.0.0.1", 0))
    server = ca.server_context("127.0.0.1")

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with contextlib.suppress(OSError), server.wrap_socket(connection, server_side=True) as tls:
                tls.recv(65536)
                tls.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    url = f"https://127.0.0.1:{listener.getsockname()[1]}/octo/widgets.git"
    env = git_env(GIT_SSL_CAINFO=str(cafile))
    done = subprocess.run(["git", "ls-remote", url], env=env, capture_output=True, text=True, timeout=30)
    listener.close()
    assert "not found" in done.stderr and "certificate" not in done.stderr, done.stderr


def test_an_inject_proxy_credential_on_a_limited_host_is_checked_first_and_named_in_the_record(stage: Stage) -> None:
    secret = Secret("ghs_" + "S3cr3t" * 6)
    placeholder = placeholder_for(secret)
    hosts = frozenset({(API, stage.ports[API])})
    stage.interceptor.add(Injection(hosts, placeholder, secret, stage.interceptor.upstream_ca_file, name="repo"))
    auth = f"Authorization: token {placeholder.reveal()}"
    merged = stage.run(
        "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT", "-H", auth, stage.url(API, MERGE)
    )
    assert merged.stdout == "403"
    pulls = stage.run("curl", "-sS", "-f", "-H", auth, stage.url(API, "/api/v3/repos/octo/widgets/pulls"))
    assert pulls.returncode == 0, pulls.stderr
    [seen] = stage.api.seen  # the refused merge never reached the upstream, with or without the secret
    assert dict((k.lower(), v) for k, v in seen.headers)["authorization"] == f"token {secret.reveal()}"
    refused, allowed = stage.records(2)
    assert (refused["credential"], allowed["credential"]) == (None, "repo")  # refused before the secret went in
    log = stage.log.path.read_text()
    assert secret.reveal() not in log and placeholder.reveal() not in log
