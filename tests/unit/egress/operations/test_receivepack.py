"""The push check on hostile and hand-made bodies: pkt-line framing, the command list, the status report."""

from __future__ import annotations

import pytest

from broker.egress.operations.decision import Decision
from broker.egress.operations.git import GitRequest, ReceivePackCheck, check_git, classify, decide_push
from broker.egress.operations.model import GitOperations
from broker.egress.operations.pktline import FLUSH, PacketError, PacketReader, sideband
from broker.egress.operations.receivepack import CommandReader, PushError, PushRequest, RefUpdate
from broker.egress.operations.refs import parse_ref_glob

RULE = "dev-agents"
ZERO, ONE, TWO = "0" * 40, "1" * 40, "2" * 40
CAPS = "report-status-v2 side-band-64k quiet object-format=sha1 agent=git/2.39.5"
HOSTS = ()
AGENT = GitOperations(HOSTS, (parse_ref_glob("refs/heads/agent/*"),))


def pkt(payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return b"%04x" % (len(data) + 4) + data


def body(*commands: tuple[str, str, str], caps: str = CAPS, options: tuple[str, ...] = (), pack: bytes = b"") -> bytes:
    lines = []
    for index, (old, new, ref) in enumerate(commands):
        lines.append(pkt(f"{old} {new} {ref}" + (f"\0 {caps}" if index == 0 else "\n")))
    out = b"".join(lines) + b"0000"
    if options:
        out += b"".join(pkt(o + "\n") for o in options) + b"0000"
    return out + pack


def fed(data: bytes, size: int, section: GitOperations = AGENT) -> Decision:
    check = ReceivePackCheck(section, RULE)
    for at in range(0, len(data), size):
        decision = check.feed(data[at : at + size])
        if decision is not None:
            return decision
    return check.end()


PACK = b"PACK\x00\x00\x00\x02\x00\x00\x00\x01" + bytes(range(256)) * 4
TWO_REFS = body((ONE, TWO, "refs/heads/agent/x"), (ZERO, TWO, "refs/heads/main"), pack=PACK)


def test_a_body_split_at_every_byte_boundary_gets_the_same_decision() -> None:
    whole = fed(TWO_REFS, len(TWO_REFS))
    assert not whole.allowed
    for split in range(1, len(TWO_REFS)):
        check = ReceivePackCheck(AGENT, RULE)
        first = check.feed(TWO_REFS[:split])
        decision = first if first is not None else check.feed(TWO_REFS[split:])
        assert decision == whole, split
    assert fed(TWO_REFS, 1) == whole


def test_the_decision_comes_before_the_pack() -> None:
    allowed = body((ONE, TWO, "refs/heads/agent/x"), pack=PACK)
    reader = CommandReader()
    end_of_list = allowed.index(b"PACK")
    assert reader.feed(allowed[: end_of_list - 1]) is None
    push = reader.feed(allowed[end_of_list - 1 : end_of_list + 3])
    assert push == PushRequest((RefUpdate(ONE, TWO, "refs/heads/agent/x"),), tuple(CAPS.split()), (), 0, end_of_list)
    assert reader.feed(b"more pack bytes") is push  # the pack is never parsed


def test_refs_inside_push_pass_and_one_outside_refuses_the_whole_push() -> None:
    assert fed(body((ONE, TWO, "refs/heads/agent/x"), (ZERO, TWO, "refs/heads/agent/deep/er")), 5).allowed
    refused = fed(TWO_REFS, 5)
    assert refused.reason == "push refused as a whole: refs/heads/main is outside push"
    for ref in ("refs/heads/agent", "refs/heads/agentx/y", "refs/tags/agent/x", "refs/heads/Agent/x"):
        assert not fed(body((ONE, TWO, ref)), 9).allowed, ref


def test_deletions_need_delete_true() -> None:
    deletion = body((ONE, ZERO, "refs/heads/agent/x"))
    refused = fed(deletion, 3)
    assert refused.reason == "push refused as a whole: deleting refs/heads/agent/x is not allowed"
    assert fed(deletion, 3, GitOperations(HOSTS, AGENT.push, delete=True)).allowed


def test_no_push_globs_means_no_pushes() -> None:
    assert not fed(body((ONE, TWO, "refs/heads/agent/x")), 50, GitOperations(HOSTS)).allowed


def test_an_empty_command_list_changes_nothing_and_passes() -> None:
    assert fed(b"0000", 1).allowed


def test_shallow_lines_and_push_options_are_read() -> None:
    data = pkt(f"shallow {TWO}") + body(
        (ONE, TWO, "refs/heads/agent/x"), caps=CAPS + " push-options", options=("ci.skip", "x=y"), pack=PACK
    )
    reader = CommandReader()
    push = reader.feed(data)
    assert push is not None and push.shallow == 1 and push.options == ("ci.skip", "x=y")
    assert push.size == data.index(b"PACK")


def test_push_options_announced_but_missing_is_refused_at_the_end() -> None:
    data = body((ONE, TWO, "refs/heads/agent/x"), caps=CAPS + " push-options")
    decision = fed(data, 4)
    assert not decision.allowed and "ended before" in decision.reason


def test_sha256_object_ids_with_their_capability() -> None:
    old, new = "a" * 64, "b" * 64
    sha256 = body((old, new, "refs/heads/agent/x"), caps="report-status object-format=sha256")
    assert fed(sha256, 10).allowed
    assert not fed(body((old, new, "refs/heads/agent/x")), 10).allowed  # 64 digits without the capability


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"00zz", "four hex digits"),
        (b" 01a" + b"x" * 40, "four hex digits"),
        (b"0x1a" + b"x" * 40, "four hex digits"),
        (b"+01a" + b"x" * 40, "four hex digits"),
        (b"0001", "special packet"),
        (b"0002", "special packet"),
        (b"0003", "special packet"),
        (b"ffff", "longer than 65520"),
        (b"fff1", "longer than 65520"),
        (pkt(f"{ONE} {TWO}"), "OLD NEW REF"),
        (pkt(f"{'A' * 40} {TWO} refs/heads/agent/x\0report-status"), "lower-case"),
        (pkt(f"{ONE[:-1]} {TWO} refs/heads/agent/x\0report-status"), "OLD NEW REF"),
        (pkt(f"{ONE}  {TWO} refs/heads/agent/x\0report-status"), "OLD NEW REF"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/../main\0report-status"), "contains .."),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x.lock\0report-status"), ".lock"),
        (pkt(f"{ONE} {TWO} refs/heads/agent//x\0report-status"), "empty segment"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x y\0report-status"), "a space"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x\x1b[31m\0report-status"), "control character"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/@{{x}}\0report-status"), "@{"),
        (pkt(f"{ONE} {TWO} HEAD\0report-status"), "refs/"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x/\0report-status"), "ends with /"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/.x\0report-status"), "starts with ."),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x*\0report-status"), "one of"),
        (pkt(b"1" * 40 + b" " + b"2" * 40 + b" refs/heads/agent/\xff\0report-status"), "not UTF-8"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x\0report-status") + pkt(f"{ONE} {TWO} refs/heads/agent/y\0x"), "NUL"),
        (pkt("push-cert\0report-status\n"), "signed pushes"),
        (pkt(f"{ONE} {TWO} refs/heads/agent/x\0report-status") + b"0004", "OLD NEW REF"),
    ],
)
def test_malformed_bodies_are_refused(data: bytes, why: str) -> None:
    for size in (1, len(data)):
        decision = fed(data + b"0000" + PACK, size)
        assert not decision.allowed and why in decision.reason, (decision.reason, size)
        assert decision.answer is not None and decision.answer.status == 403


def test_a_body_that_ends_inside_the_command_list_is_refused() -> None:
    for cut in range(len(TWO_REFS) - len(PACK)):  # every cut before the flush that ends the list
        decision = fed(TWO_REFS[:cut], 1000)
        assert not decision.allowed and "ended before" in decision.reason, cut


def test_a_command_list_beyond_the_limit_is_refused_without_holding_more() -> None:
    reader = CommandReader(limit=10_000)
    line = pkt(f"{ONE} {TWO} refs/heads/agent/x\0report-status")
    more = pkt(f"{ONE} {TWO} refs/heads/agent/y\n")
    reader.feed(line)
    with pytest.raises(PushError, match="longer than 10000 bytes"):
        for _ in range(1000):
            reader.feed(more)
    # a declared 64 KiB packet that never completes is bounded the same way
    reader = CommandReader(limit=10_000)
    assert reader.feed(b"fff0" + b"x" * 9000) is None
    with pytest.raises(PushError, match="longer than"):
        reader.feed(b"x" * 2000)


def demux(answer_body: bytes) -> tuple[bytes, bytes]:
    """Side-band channels 1 and 2 of a receive-pack answer (the trailing flush checked)."""
    packets = PacketReader()
    packets.push(answer_body)
    bands = {1: b"", 2: b""}
    while (item := packets.next()) is not None and item is not FLUSH:
        assert isinstance(item, bytes)
        bands[item[0]] += item[1:]
    assert item is FLUSH and packets.pending == 0
    return bands[1], bands[2]


def report_lines(report: bytes) -> list[bytes]:
    packets = PacketReader()
    packets.push(report)
    lines = []
    while (item := packets.next()) is not FLUSH:
        assert isinstance(item, bytes)
        lines.append(item)
    assert packets.pending == 0
    return lines


def test_the_report_is_the_one_receive_pack_sends_in_side_band_one() -> None:
    refused = fed(TWO_REFS, 100)
    assert refused.answer is not None
    assert refused.answer.status == 200
    assert refused.answer.content_type == "application/x-git-receive-pack-result"
    report, message = demux(refused.answer.body)
    assert report_lines(report) == [
        b"unpack ok\n",
        b"ng refs/heads/agent/x refused by policy dev-agents (another ref of this push is refused)\n",
        b"ng refs/heads/main refused by policy dev-agents\n",
    ]
    assert message == b"refused by policy dev-agents: push refused as a whole: refs/heads/main is outside push\n"


def test_without_side_band_the_report_is_bare_and_without_a_report_it_is_a_403() -> None:
    plain = fed(body((ZERO, TWO, "refs/heads/main"), caps="report-status"), 7)
    assert plain.answer is not None and plain.answer.status == 200
    assert report_lines(plain.answer.body) == [b"unpack ok\n", b"ng refs/heads/main refused by policy dev-agents\n"]
    none = fed(body((ZERO, TWO, "refs/heads/main"), caps="side-band-64k agent=x"), 7)
    assert none.answer is not None and none.answer.status == 403
    assert (
        none.answer.body == b"refused by policy dev-agents: push refused as a whole: refs/heads/main is outside push\n"
    )


def test_side_band_packets_respect_the_negotiated_size() -> None:
    many = tuple((ZERO, TWO, f"refs/heads/main-{i:04d}") for i in range(200))
    for caps, size in (("report-status side-band", 1000), ("report-status side-band-64k", 65520)):
        decision = fed(body(*many, caps=caps), 4096)
        assert decision.answer is not None
        packets = PacketReader()
        packets.push(decision.answer.body)
        while (item := packets.next()) is not None and item is not FLUSH:
            assert isinstance(item, bytes) and len(item) + 4 <= size
        report, _ = demux(decision.answer.body)
        assert len(report_lines(report)) == 201
    assert sideband(1, b"x" * 2000, 1000).count(b"\x01") == 3


def test_smart_http_requests_are_told_apart() -> None:
    assert classify("GET", ("/o/r.git/info/refs",), "service=git-upload-pack") is GitRequest.FETCH_ADVERTISEMENT
    assert classify("GET", ("/o/r.git/info/refs",), "service=git-receive-pack") is GitRequest.PUSH_ADVERTISEMENT
    assert classify("GET", ("/o/r.git/info/refs",), "service=git-receive-pack&service=x") is GitRequest.OTHER
    assert classify("GET", ("/o/r.git/info/refs",), "") is GitRequest.OTHER  # dumb HTTP
    assert classify("POST", ("/o/r.git/git-upload-pack",), "") is GitRequest.FETCH
    assert classify("POST", ("/o/r.git/git-receive-pack",), "") is GitRequest.PUSH
    assert classify("PUT", ("/o/r.git/git-receive-pack",), "") is GitRequest.PUSH
    assert classify("POST", ("/o/r.git%2fgit-receive-pack", "/o/r.git/git-receive-pack"), "") is GitRequest.PUSH
    assert classify("GET", ("/o/r/archive/main.zip",), "") is GitRequest.OTHER


def test_a_push_that_is_not_a_plain_post_is_refused_at_the_head() -> None:
    assert not isinstance(check_git(AGENT, RULE, GitRequest.PUSH, "GET", ""), ReceivePackCheck)
    encoded = check_git(AGENT, RULE, GitRequest.PUSH, "POST", "gzip")
    assert isinstance(encoded, Decision) and "content-encoded" in encoded.reason
    assert isinstance(check_git(AGENT, RULE, GitRequest.PUSH, "POST", ""), ReceivePackCheck)
    fetch = check_git(AGENT, RULE, GitRequest.FETCH, "POST", "gzip")
    assert isinstance(fetch, Decision) and fetch.allowed


def test_decide_push_names_each_problem() -> None:
    push = PushRequest(
        (RefUpdate(ONE, ZERO, "refs/heads/agent/x"), RefUpdate(ONE, TWO, "refs/heads/main")), ("report-status",)
    )
    decision = decide_push(AGENT, RULE, push)
    assert decision.reason == (
        "push refused as a whole: refs/heads/main is outside push; deleting refs/heads/agent/x is not allowed"
    )
    assert decision.to_json() == {
        "decision": "refused",
        "rule": RULE,
        "operations": "git",
        "reason": decision.reason,
    }


def test_packet_reader_hands_back_flushes_and_payloads() -> None:
    packets = PacketReader()
    packets.push(b"0006a\n00")
    assert packets.next() == b"a\n"
    assert packets.next() is None
    packets.push(b"00")
    assert packets.next() is FLUSH
    with pytest.raises(PacketError):
        packets.push(b"zzzz")
        packets.next()
