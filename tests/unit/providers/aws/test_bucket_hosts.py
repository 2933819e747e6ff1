"""The virtual-hosted S3 hosts an ``inject: proxy`` AWS credential adds to its provider's proxy hosts: one per
bucket its session policy's Allow statements name by exact name, under each S3 host; the core keeps those the
session's ``network`` allows (``broker.core.credential.proxied.allowed_hosts``, the proxy's own check).
"""

from __future__ import annotations

from broker.core.credential.proxied import allowed_hosts
from broker.egress.destinations import parse_destination
from tests.fixtures.aws_sts import parse, policy, statement

ROLE = "arn:aws:iam::123456789012:role/agent"
PROXY_HOSTS = ("sts.eu-west-1.amazonaws.com:443", "s3.eu-west-1.amazonaws.com:443")


def test_each_bucket_named_exactly_becomes_its_host_under_each_s3_host() -> None:
    request = parse(
        {
            "role_arn": ROLE,
            "session_policy": policy(
                statement(Action="s3:ListBucket", Resource=["arn:aws:s3:::builds", "arn:aws:s3:::logs-*"]),
                statement(Resource=["arn:aws:s3:::builds/*", "arn:aws-cn:s3:::cache-1/a/b", "arn:aws:s3:::*/x"]),
                statement(Resource=["arn:aws:s3:::my.dotted.bucket/*", "arn:aws:s3:::${aws:username}/*"]),
                statement(Effect="Deny", Resource="arn:aws:s3:::secrets/*"),
                statement(Action="sqs:SendMessage", Resource="arn:aws:sqs:eu-west-1:123456789012:queue"),
            ),
        }
    )
    # A wildcard, a policy variable or a dotted name names no one host; a Deny grants none.
    assert request.more_proxy_hosts(PROXY_HOSTS) == (
        "builds.s3.eu-west-1.amazonaws.com:443",
        "cache-1.s3.eu-west-1.amazonaws.com:443",
    )
    assert request.more_proxy_hosts(("sts.eu-west-1.amazonaws.com:443",)) == ()


def test_no_session_policy_names_no_bucket() -> None:
    assert parse({"role_arn": ROLE}).more_proxy_hosts(PROXY_HOSTS) == ()


def test_the_core_keeps_only_the_hosts_network_allows() -> None:
    network = tuple(
        parse_destination(d) for d in ("s3.eu-west-1.amazonaws.com:443", "builds.s3.eu-west-1.amazonaws.com:443")
    )
    hosts = ("builds.s3.eu-west-1.amazonaws.com:443", "cache-1.s3.eu-west-1.amazonaws.com:443", "ab--c.s3.x.y:443")
    assert [str(h) for h in allowed_hosts(hosts, network)] == ["builds.s3.eu-west-1.amazonaws.com:443"]
    wildcard = (parse_destination("*.s3.eu-west-1.amazonaws.com:443"),)
    assert [str(h) for h in allowed_hosts(hosts, wildcard)] == [
        "builds.s3.eu-west-1.amazonaws.com:443",
        "cache-1.s3.eu-west-1.amazonaws.com:443",
    ]
