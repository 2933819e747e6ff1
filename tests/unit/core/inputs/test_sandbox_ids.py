"""A rule's sandbox_uids/sandbox_gids (``broker.core.inputs.rules``): which sandbox identities it allows."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.inputs.policy import load_policy
from broker.vocab.errors import PolicyFileError
from tests.unit.core.inputs.test_policy import POLICY, decision, make_config, manifest, write

NARROW_IDS = POLICY.replace('sandbox_uids: ["0-65534"]', 'sandbox_uids: [1000, "2000-2999"]').replace(
    'sandbox_gids: ["0-65534"]', 'sandbox_gids: [1000, "2000-2999"]'
)


@pytest.mark.parametrize(
    ("uid", "gid", "allowed", "named"),
    [
        (1000, 1000, True, ""),
        (2999, 2000, True, ""),
        (65534, 1000, False, "sandbox uid 65534"),
        (1000, 6, False, "sandbox gid 6"),  # gid 6 is "disk" on Debian: raw block devices
        (3000, 1000, False, "sandbox uid 3000"),
    ],
)
def test_the_manifest_cannot_choose_a_sandbox_identity_the_rule_does_not_list(
    tmp_path: Path, uid: int, gid: int, allowed: bool, named: str
) -> None:
    text = manifest().replace("sandbox: {uid: 1000, gid: 1000}", f"sandbox: {{uid: {uid}, gid: {gid}}}")
    result = decision(tmp_path, text, policy=NARROW_IDS)
    assert result.allowed is allowed
    if not allowed:
        assert any(named in reason for reason in result.reasons), result.reasons


def test_a_rule_without_sandbox_ids_allows_no_session(tmp_path: Path) -> None:
    bare = POLICY.replace('    sandbox_uids: ["0-65534"]\n    sandbox_gids: ["0-65534"]\n', "")
    result = decision(tmp_path, manifest(), policy=bare)
    assert not result.allowed
    assert result.reasons == ("kv: rule agents: lists no sandbox_uids/sandbox_gids, so it allows no session",)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('"5-2"', "is not a range of ids"),
        ('"x"', 'expected an id or an "A-B" range'),
        ("-1", "is not a range of ids"),
        ("4294967295", "is not a range of ids"),
        ("true", 'expected an id or an "A-B" range'),
    ],
)
def test_sandbox_id_lists_are_parsed_strictly(tmp_path: Path, value: str, message: str) -> None:
    config = make_config(tmp_path)
    write(tmp_path, POLICY.replace('sandbox_uids: ["0-65534"]', f"sandbox_uids: [{value}]"))
    with pytest.raises(PolicyFileError, match="sandbox_uids"):
        try:
            load_policy(config.policy_dir, config)
        except PolicyFileError as exc:
            assert message in str(exc)
            raise
