"""The daemon's own endpoints, which no one command owns (``GET /v1/health``, ``GET /metrics``, ``POST
/v1/sweep``), and ``POST /v1/policy/check``, the decision for the peer the kernel names."""

from __future__ import annotations

from broker import __version__
from broker.core.inputs.manifest import parse_manifest
from broker.core.inputs.policy import decide
from broker.core.sweeping import sweep as run_sweep
from broker.daemon.access import operators_only
from broker.daemon.call import Call, finish
from broker.host.serving.wire import Raw, error_body
from broker.telemetry.metrics import CONTENT_TYPE
from broker.vocab.errors import PolicyDenied, RevokeIncomplete, UnknownSession


def health(call: Call) -> None:
    call.send(200, {"status": "ok", "version": __version__})


def metrics(call: Call) -> None:
    """The Prometheus text format of the daemon's metrics (every family, the store's gauges read now)."""
    operators_only(call.peer, "read the metrics")
    if call.broker.metrics is None:
        raise UnknownSession("this daemon keeps no metrics")
    call.send(200, Raw(call.broker.metrics.exposition(), CONTENT_TYPE))


def sweep(call: Call) -> None:
    operators_only(call.peer, "sweep")
    report = run_sweep(call.broker)
    code = 0 if report.complete else RevokeIncomplete.exit_code
    call.send(200, finish(call.broker, report.to_json()), code)


def check(call: Call) -> None:
    """The decision for the peer the kernel names (nothing in the request names another requester or a default
    sandbox identity); a denial is the exit-3 error with the decision beside it, for the client to print."""
    broker, peer = call.broker, call.peer
    manifest = parse_manifest(call.request.body, broker.config, as_json=True, identity=(peer.uid, peer.gid))
    decision = decide(broker.policy, manifest, peer.requester(), broker.config)
    if not decision.allowed:
        denied = {**error_body(decision.denial_message(), PolicyDenied.exit_code), "decision": decision.to_json()}
        call.send(403, denied)
        return
    call.send(200, decision.to_json())
