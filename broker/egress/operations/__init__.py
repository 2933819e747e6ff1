"""Operations, not just hosts: what a session may do on the hosts the proxy terminates TLS for.

A policy rule's ``operations`` (``git``, ``github_api``, ``http``) limits
requests, not only destinations: pushes only to some refs, no merges or
approvals, no unlisted GraphQL mutations, read-only methods. This package is
the self-contained heart of it, standard library and graphql-core only:

- ``parsing.read_operations`` / ``parsing.check_network``: strict reading of the
  mapping, and its hosts against ``network``;
- ``narrowing.narrow``: a manifest's ``operations`` within the rule's, or
  ``PolicyDenied`` naming the widening key;
- ``checker.OperationsChecker``: per request, a ``Decision`` on the head or a
  ``BodyCheck`` fed the body (a push's ref updates, a GraphQL document, a
  review), the refusal's own ``Answer`` included;
- the pieces: ``segments`` (the glob language), ``refs``, ``routes``,
  ``pktline``, ``receivepack``, ``git``, ``github``, ``graphql_doc``, ``jsonbody``,
  ``decision``, ``model``.

``OperationsChecker`` is imported from ``broker.egress.operations.checker``
itself, never through this package: it brings graphql-core, which the
policy loader and the manifest parser (reading and narrowing only) do not
need on every command's path.
"""

from __future__ import annotations

from broker.egress.operations.decision import Answer, BodyCheck, Decision, Kind
from broker.egress.operations.model import NO_OPERATIONS, Operations
from broker.egress.operations.narrowing import narrow, narrowed
from broker.egress.operations.parsing import check_network, read_operations

__all__ = [
    "NO_OPERATIONS",
    "Answer",
    "BodyCheck",
    "Decision",
    "Kind",
    "Operations",
    "check_network",
    "narrow",
    "narrowed",
    "read_operations",
]
