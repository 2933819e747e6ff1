"""``broker audit verify``: the hash chain, the signed checkpoints and the witness; exit 6 naming the first bad seq."""

from __future__ import annotations

import json
from pathlib import Path

from broker.audit.chain import repair_torn_tail
from broker.audit.verify import failure_json, parse_head, verify_log
from broker.audit.witness import WitnessConfig, parse_witness_url, witnessed_checkpoints
from broker.cli.audit.fleet import fleet_target, optional_config, pinned_keys, store_head, verify_fleet
from broker.cli.context import Invocation, echo
from broker.cli.opening import open_broker
from broker.vocab.errors import BadInput, LogVerificationError


def verify(
    run: Invocation,
    log: Path | None,
    public_key: Path | None,
    expect_head: str | None,
    strict: bool,
    witness: str | None,
    witness_endpoint_url: str | None,
    witness_region: str | None,
    witness_profile: str | None,
    store: str | None,
    repair: bool,
    as_json: bool,
) -> None:
    expected = [parse_head(expect_head)] if expect_head is not None else []
    if log is not None and store is not None:
        raise BadInput("give --log FILE or --store URL, not both")
    offline = log is not None and public_key is not None  # an auditor's own machine: no config needed
    config = optional_config(run) if store is not None else None if offline else run.load_config()
    fleet = fleet_target(run, log, store) if log is None else None
    if fleet is not None and repair:
        raise BadInput("--repair: the fleet's log has no torn record to cut (each record is one row)")
    path = log if log is not None else Path(config.state_dir if config else ".") / "issuance.jsonl"
    keys = pinned_keys(config, public_key)[0] if fleet is None else {}
    if config is not None and log is None and store is None:
        expected += store_head(config)
    witnessed = None
    if witness is not None:
        bucket, prefix = parse_witness_url(witness, "--witness")
        configured = config.witness if config is not None else None
        source = WitnessConfig(
            bucket,
            prefix,
            witness_endpoint_url or (configured.endpoint_url if configured else None),
            witness_region or (configured.region if configured else None),
            witness_profile or (configured.profile if configured else None),
        )
    try:
        if witness is not None:
            witnessed = witnessed_checkpoints(source)
        if fleet is not None:
            result = verify_fleet(fleet, public_key, expected=tuple(expected), witnessed=witnessed, strict=strict)
        else:
            result = verify_log(
                path, keys, expected_heads=tuple(expected), witnessed=witnessed, allow_torn_tail=repair, strict=strict
            )
    except LogVerificationError as error:
        if as_json:
            echo(json.dumps(failure_json(error)))
        raise
    if result.torn_tail and repair:
        removed = repair_torn_tail(path)
        if config is not None and log is None:
            with open_broker(config) as broker:
                broker.log.append(
                    "log.repaired", session=None, task=None, requester=str(broker.requester), bytes_removed=removed
                )
        echo(f"repaired: cut a torn record of {removed} bytes after seq {result.records}", err=True)
    if as_json:
        echo(json.dumps(result.to_json()))
        return
    echo(result.summary(witness=witness is not None))
