"""The keys of an ``operations`` mapping as the reference documents them (``docs/reference.md``).

Data only, next to the parser that reads these keys (``parsing``): the
reference renders them at a rule's ``operations`` and at a manifest's, and
its test checks them against the keys the real loaders read.
"""

from __future__ import annotations

#: name, kind, required, description, default
KeyText = tuple[str, str, bool, str, str]

HOST = "HOST:PORT"
GLOB = "* is one segment; a last segment * is one or more further segments"
INTRO = (
    "Each host needs a matching network entry. The proxy terminates TLS for every operations host and checks each"
    " request before anything goes upstream; every request is an egress.request record. A manifest's operations"
    " narrow the rule's, never widen them (exit 3 names the key)."
)

#: (title suffix, path below ``operations``, keys, intro)
SECTIONS: tuple[tuple[str, str, tuple[KeyText, ...], str], ...] = (
    (
        "operations",
        "",
        (
            ("git", "table", False, "git smart HTTP on its hosts: fetches pass, pushes only to push refs.", ""),
            ("github_api", "table", False, "GitHub REST and GraphQL on its hosts: routes, approvals, mutations.", ""),
            ("http", "table", False, f"{HOST} -> methods and paths, for any other host.", ""),
        ),
        INTRO,
    ),
    (
        "operations.git",
        ".git",
        (
            ("hosts", "list", True, f"{HOST} entries of the git hosts.", ""),
            ("push", "list", False, f"Ref globs a push may create or update (refs/heads/agent/*; {GLOB}).", "none"),
            ("delete", "boolean", False, "Whether a push may delete a ref.", "false"),
        ),
        "A push naming any ref outside push (or a deletion) is refused whole; git prints ng REF refused by policy.",
    ),
    (
        "operations.github_api",
        ".github_api",
        (
            ("hosts", "list", True, f"{HOST} entries of the API hosts.", ""),
            ("allow", "list", False, f"METHOD PATH routes allowed (GET *, POST /repos/*/*/pulls; {GLOB}).", "none"),
            ("deny", "list", False, "METHOD PATH routes refused even when allow matches.", "none"),
            ("reviews", "table", False, "approve: whether a review may APPROVE.", ""),
            ("graphql_mutations", "list", False, "GraphQL mutation names allowed; queries always pass.", "none"),
        ),
        "",
    ),
    (
        "operations.github_api.reviews",
        ".github_api.reviews",
        (("approve", "boolean", False, "Whether a review with event APPROVE passes (REST and GraphQL).", "false"),),
        "",
    ),
    (
        "operations.http",
        ".http",
        ((HOST, "table", False, "One host's methods and paths; a host is under github_api or http, not both.", ""),),
        "",
    ),
    (
        f"operations.http.{HOST}",
        f".http.{HOST}",
        (
            ("methods", "list", True, "Upper-case methods allowed (GET, HEAD).", ""),
            ("paths", "list", False, f"Path globs allowed ({GLOB}; * alone is every path).", "*"),
        ),
        "",
    ),
)
