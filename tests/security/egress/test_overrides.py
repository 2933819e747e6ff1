"""A request runs the method and path of its request line: override headers are refused on every terminated host.

Express's method-override, ASP.NET and Google's APIs run the method named
in ``X-HTTP-Method-Override`` (or ``X-HTTP-Method``, ``X-Method-Override``)
instead of the request line's; IIS and Symfony-style front controllers route
by ``X-Original-URL`` or ``X-Rewrite-URL``. The operations decision, the
credential put in and the ``egress.request`` record are all about the
request line, so a ``GET`` carrying ``X-HTTP-Method-Override: DELETE`` to a
read-only host, or ``X-Original-URL`` naming a denied path, would run what
was never decided. From inside ``broker exec --sandbox bwrap --network
allowlist``, curl sends each such header (and one spelled with ``_``, which
CGI-style gateways read as the same) to a host whose ``http`` operations
allow only GET and HEAD, to a GitHub API host of ``github_api``, and to a
plain credential host (a ``kind: secret`` key of ``inject: proxy``, no
operations): each is refused with 400, nothing reaches an upstream, and the
session's records say so.
"""

from __future__ import annotations

import pytest

from tests.fixtures.limited_exec import LimitedExec, limited_exec
from tests.fixtures.sandbox import sandbox_unavailable

__all__ = ["limited_exec"]  # fixtures
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(bool(sandbox_unavailable()), reason=str(sandbox_unavailable())),
]

OVERRIDES = [
    "X-HTTP-Method-Override: DELETE",
    "X-HTTP-Method: PUT",
    "X-Method-Override: DELETE",
    "X-Original-URL: /api/v3/repos/octo/widgets/pulls/1/merge",
    "X-Rewrite-URL: /admin/delete-everything",
    "X-Override-URL: /admin/delete-everything",
    "x_http_method_override: DELETE",
]

INSIDE = r"""
try() {  # NAME URL [HEADER]: the status curl got, one line
  if [ -n "$3" ]; then set -- "$1" "$2" -H "$3"; else set -- "$1" "$2"; fi
  name=$1 url=$2; shift 2
  printf '%s|%s|%s\n' "$name" "${2:-none}" "$(curl -sS -o /dev/null -w '%{http_code}' \
    -H "Authorization: Bearer $SERVICE_KEY" "$@" "$url")"
}
for target in "index $INDEX/simple/" "api $API/api/v3/user" "service $SERVICE/v1/models"; do
  set -- $target
  try "$1" "$2"
  while IFS= read -r header; do try "$1" "$2" "$header"; done <<'EOF'
OVERRIDES
EOF
done
""".replace("OVERRIDES", "\n".join(OVERRIDES))


def test_method_and_path_overrides_are_refused_on_every_terminated_host(limited_exec: LimitedExec) -> None:
    result = limited_exec.run(INSIDE)
    assert result.code == 0, result.stdout + result.stderr
    answers = {tuple(line.split("|")[:2]): line.split("|")[2] for line in result.stdout.splitlines() if "|" in line}
    for host in ("index", "api", "service"):
        assert answers[(host, "none")] == "200", result.stdout  # the host answers the request without one
        assert {header: answers[(host, header)] for header in OVERRIDES} == dict.fromkeys(OVERRIDES, "400")
    # Only the requests without an override reached the upstreams; the service's with the real key.
    assert limited_exec.index.requests() == [("GET", "/simple/")]
    assert limited_exec.api.requests() == [("GET", "/api/v3/user")]
    assert limited_exec.service.requests() == [("GET", "/v1/models")]
    [seen] = limited_exec.service.seen
    assert ("authorization", f"Bearer {limited_exec.key}") in seen.headers
    # Each refusal is on its record and counted, by destination, as an override.
    records = limited_exec.records()
    refused = [r for r in records if r["decision"] == "refused"]
    assert len(refused) == 3 * len(OVERRIDES) and all(r["status"] == 400 for r in refused)
    assert all("is refused" in r["reason"] and r["upstream_status"] is None for r in refused)
    counted = {
        r["destination"]: (r["reason"], r["count"])
        for r in limited_exec.env.log_records()
        if r["event"] == "egress.refused"
    }
    assert counted == {
        limited_exec.authority(upstream): ("override", len(OVERRIDES))
        for upstream in (limited_exec.index, limited_exec.api, limited_exec.service)
    }
    assert limited_exec.key not in result.stdout + limited_exec.env.log_path.read_text()
