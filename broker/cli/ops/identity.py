"""``broker identity``: the issuer's JWKS, discovery document and revocation list, and a new signing key."""

from __future__ import annotations

from broker.cli.context import Invocation, echo, print_json
from broker.cli.opening import open_broker
from broker.cli.render import published
from broker.core.identity.documents import DISCOVERY, JWKS, REVOKED, required
from broker.core.identity.wellknown import document


def jwks(run: Invocation) -> None:
    _show(run, JWKS)


def discovery(run: Invocation) -> None:
    _show(run, DISCOVERY)


def revoked(run: Invocation) -> None:
    _show(run, REVOKED)


def _show(run: Invocation, path: str) -> None:
    with open_broker(run.load_config()) as broker:
        found = document(required(broker.issuer), broker.config.providers, broker.store, path, broker.clock())
    published(found, {})


def rotate_key(run: Invocation, as_json: bool) -> None:
    with open_broker(run.load_config()) as broker:
        issuer = required(broker.issuer)
        old, new = issuer.rotate()
        broker.log.append("identity.key_rotated", session=None, task=None, requester=str(broker.requester),
                          old_kid=old, kid=new)  # fmt: skip
    if as_json:
        print_json({"old_kid": old, "kid": new})
    else:
        echo(f"new signing key {new}; {old} stays in the JWKS until its last token ends (an hour)")
