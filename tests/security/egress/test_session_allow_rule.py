"""``broker session allow`` keeps the session's rule: no destination under another rule, whose operations the
running proxy would not apply; the rule's operations for the new host apply at once.

A sandbox in bubblewrap POSTs, over plain HTTP through its proxy, to a
recording upstream ``B``; ``broker session allow`` runs from outside, as a
launcher acting on the agent's "I need one more host" would. Two rules
cover the task: ``plain`` (network ``A``, no operations) and ``limited``
(network ``A`` and ``B``, ``B`` read-only). A session issued for ``A`` is
``plain``'s: an allow of ``B`` used to be decided by ``limited`` (the first
rule covering ``A`` and ``B``) while the proxy kept ``plain``'s nothing,
so the POST reached ``B``. Now it is refused, naming the session's rule
(exit 3), and so is an allow whose rule limits a host the session's CA
cannot cover. A session of ``limited`` itself gets ``B`` with ``limited``'s
operations as the policy has them when the allow is made: the POST is
refused (403), the GET passes. A session whose grant the operator withdrew
while it runs gets no allow at all (exit 3, the withdrawal logged once).
"""

from __future__ import annotations

from collections.abc import Callable

from tests.fixtures.crash import broker_process
from tests.integration.egress.test_session_allow import Running, running, task_text

__all__ = ["running"]  # fixture

INSIDE = r"""
export NO_PROXY= no_proxy=  # the upstreams are on 127.0.0.1 here; a real host is never exempt
post() { curl -s -o /dev/null -w '%{http_code}' -X POST -d x "http://127.0.0.1:$1/write"; }
get() { curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/read"; }
step() { echo "$2" > "/workspace/$1.tmp" && mv "/workspace/$1.tmp" "/workspace/$1"; }
wait_for() { while [ ! -e "/workspace/$1" ]; do sleep 0.05; done; }
step before "post=$(post $B)"
wait_for go1
step after "get=$(get $B) post=$(post $B)"
"""

RULE = """
  - id: {id}
    tasks: ["fix-*"]
    sandbox_uids: [1000]
    sandbox_gids: [1000]
    network: [{network}]
{operations}    grants:
      - provider: vault
        policies: ["ci-*"]
        max_uses: 100
"""


def rule(rule_id: str, network: list[int], operations: dict[int, str] | None = None) -> str:
    """A rule of the test's policy: its network on loopback ports, and ``http`` operations by port."""
    text = "    operations:\n      http:\n" if operations else ""
    for port, methods in (operations or {}).items():
        text += f'        "127.0.0.1:{port}": {{methods: [{methods}]}}\n'
    hosts = ", ".join(f'"127.0.0.1:{port}"' for port in network)
    return RULE.format(id=rule_id, network=hosts, operations=text)


def run(running: Running, during: Callable[[str], None]) -> tuple[str, str]:
    """The exec of the task for ``A`` alone; ``during(session)`` between the sandbox's two steps; what it saw."""
    env = running.env
    task = env.write_task(task_text(running.a.port))
    script = f"export B={running.b.port}\n{INSIDE}"
    process = broker_process(
        env, "exec", "--task", str(task), "--workspace", str(running.workspace), "--", "sh", "-c", script
    )
    try:
        before = running.wait("before")
        during(running.session())
        running.go("go1")
        after = running.wait("after")
        _, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return before, after


def test_an_allow_under_another_rule_than_the_sessions_is_refused_naming_its_rule(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    env.write_policy("rules:" + rule("plain", [a]) + rule("limited", [a, b], {b: "GET"}))

    def allow(session: str) -> None:
        refused = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert refused.code == 3, f"the allow was let through: {refused.stdout}{refused.stderr}"
        assert "rule plain" in refused.stderr and f"127.0.0.1:{b} is not in its network" in refused.stderr
        assert refused.stderr.count("\n") == 1
        # The operator adds B, read-only, to plain itself: the session's CA (it terminated nothing at issue)
        # cannot cover B, so B's operations could not apply: refused too, rather than B unlimited.
        env.write_policy("rules:" + rule("plain", [a, b], {b: "GET"}) + rule("limited", [a, b], {b: "GET"}))
        uncovered = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert uncovered.code == 3, uncovered.stderr
        assert "rule plain's operations limit 127.0.0.1" in uncovered.stderr and "CA" in uncovered.stderr

    before, after = run(running, allow)
    assert before == "post=403"
    assert after == "get=403 post=403"  # B was never allowed
    assert running.b.requests() == []
    assert not any(r["event"] == "session.allowed" for r in env.log_records())
    assert env.run("audit", "verify").code == 0


def test_the_sessions_rules_operations_as_the_policy_has_them_now_apply_at_once(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    # A is limited at issue (so the session has a CA, for 127.0.0.1); B is in the rule's network, unlimited.
    env.write_policy("rules:" + rule("limited", [a, b], {a: "GET, POST"}))

    def allow(session: str) -> None:
        # Before the allow, the operator makes B read-only: the running proxy takes that with B.
        env.write_policy("rules:" + rule("limited", [a, b], {a: "GET, POST", b: "GET"}))
        allowed = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert allowed.code == 0, allowed.stderr

    before, after = run(running, allow)
    assert before == "post=403"
    assert after == "get=200 post=403"
    assert running.b.requests() == [("GET", "/read")]
    refused = [r for r in env.log_records() if r["event"] == "egress.request" and r.get("decision") == "refused"]
    assert [(r["method"], r["rule"]) for r in refused] == [("POST", "limited")]


def test_an_allow_for_a_session_whose_grant_was_withdrawn_is_refused(running: Running) -> None:
    env, a, b = running.env, running.a.port, running.b.port
    env.write_policy("rules:" + rule("limited", [a, b]))

    def allow(session: str) -> None:
        env.write_policy("rules:" + rule("limited", [a, b]).replace('"ci-*"', '"other-*"'))  # the grant goes
        refused = env.run_process("session", "allow", "--session", session, f"127.0.0.1:{b}")
        assert refused.code == 3, refused.stderr
        assert f"the policy no longer allows session {session}" in refused.stderr

    before, after = run(running, allow)
    assert (before, after) == ("post=403", "get=403 post=403")
    assert running.b.requests() == []
    withdrawn = [r for r in env.log_records() if r["event"] == "session.policy_withdrawn"]
    assert len(withdrawn) == 1
