"""``github_api`` limits hold for GitHub's other spellings of a request: a repository by id, a review's query.

GitHub answers a repository's routes by its id as well as by its name:
``PUT /repositories/1296269/pulls/1/merge`` merges as ``PUT
/repos/OWNER/REPO/pulls/1/merge`` does (its pagination links name that form;
GHES serves it under ``/api/v3``). Under a broad allow, a ``deny`` written for
the name form must refuse the id form too, and so must the check of an
approving review. And a review's event given in the query string (``POST
.../reviews?event=APPROVE`` with the body ``{}``) is not read from the body
the check reads: a server that takes parameters from the query would approve.
curl goes through the session's proxy (in process,
``tests/fixtures/operations_stage.py``) to the recording stand-in of a GHES
API; what reached it is what it recorded.
"""

from __future__ import annotations

import json

from broker.egress.operations import read_operations
from broker.egress.operations.checker import OperationsChecker
from broker.vocab.errors import PolicyFileError
from broker.vocab.fields import Fields
from tests.fixtures.operations_stage import API, RULE, Stage, stage

__all__ = ["stage"]  # fixtures

REPO_ID = "1296269"


def limit(stage: Stage, **section: object) -> None:
    """The API host's ``github_api`` section for the rest of the test."""
    document = {"github_api": {"hosts": [f"{API}:{stage.ports[API]}"], **section}}
    stage.interceptor.limit(OperationsChecker(read_operations(Fields(document, "operations", PolicyFileError)), RULE))


def curl(stage: Stage, method: str, path: str, body: str | None = None) -> tuple[int, str]:
    data = ["-H", "Content-Type: application/json", "--data-binary", body] if body is not None else []
    done = stage.run("curl", "-sS", "-X", method, *data, "-w", "\n%{http_code}", stage.url(API, path))
    assert done.returncode == 0, done.stderr
    text, _, status = done.stdout.rpartition("\n")
    return int(status), text


def test_a_denied_route_is_refused_in_its_by_id_spelling_too(stage: Stage) -> None:
    limit(stage, allow=["* *"], deny=["PUT /api/v3/repos/*/*/pulls/*/merge"], reviews={"approve": False})
    for path in (
        "/api/v3/repos/octo/widgets/pulls/1/merge",
        f"/api/v3/repositories/{REPO_ID}/pulls/1/merge",
        f"/api/v3/REPOSITORIES/{REPO_ID}/pulls/1/merge/",
    ):
        status, text = curl(stage, "PUT", path)
        assert status == 403, (path, text)
        assert json.loads(text)["message"].startswith(f"refused by policy {RULE}: PUT ")
        assert "matches deny PUT /api/v3/repos/*/*/pulls/*/merge" in text
    approving = curl(stage, "POST", f"/api/v3/repositories/{REPO_ID}/pulls/1/reviews", '{"event": "APPROVE"}')
    assert approving[0] == 403 and "reviews.approve is false" in approving[1]
    assert stage.api.requests() == []
    # What the deny does not name passes in either spelling (GitHub's pagination links use the id form).
    assert curl(stage, "GET", f"/api/v3/repositories/{REPO_ID}/issues?page=2")[0] == 200
    assert curl(stage, "PUT", f"/api/v3/repositories/{REPO_ID}/contents/x", "{}")[0] == 200
    assert stage.api.requests() == [
        ("GET", f"/api/v3/repositories/{REPO_ID}/issues?page=2"),
        ("PUT", f"/api/v3/repositories/{REPO_ID}/contents/x"),
    ]
    refused = [(r["method"], r["path"]) for r in stage.records(6) if r["decision"] == "refused"]
    assert refused == [
        ("PUT", "/api/v3/repos/octo/widgets/pulls/1/merge"),
        ("PUT", f"/api/v3/repositories/{REPO_ID}/pulls/1/merge"),
        ("PUT", f"/api/v3/REPOSITORIES/{REPO_ID}/pulls/1/merge/"),
        ("POST", f"/api/v3/repositories/{REPO_ID}/pulls/1/reviews"),
    ]


def test_an_approving_review_s_event_in_the_query_string_is_refused(stage: Stage) -> None:
    limit(stage, allow=["GET *", "POST /api/v3/repos/*/*/pulls/*/reviews"], reviews={"approve": False})
    reviews = "/api/v3/repos/octo/widgets/pulls/1/reviews"
    for query in ("?event=APPROVE", "?event=approve", "?%65vent=APPROVE", "?x=1&event=APPROVE"):
        status, text = curl(stage, "POST", reviews + query, "{}")
        assert status == 403, (query, text)
        assert "never a query string" in json.loads(text)["message"]
    assert stage.api.requests() == []
    assert curl(stage, "POST", reviews, '{"event": "COMMENT", "body": "nits"}')[0] == 201
    assert stage.api.requests() == [("POST", reviews)]
    records = stage.records(5)
    assert [r["decision"] for r in records] == ["refused"] * 4 + ["allowed"]
