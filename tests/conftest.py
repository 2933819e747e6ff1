"""Shared fixtures live in ``tests/fixtures``; this file only registers them."""

pytest_plugins = [
    "tests.fixtures.brokerenv",
    "tests.fixtures.openbao",
    "tests.fixtures.aws",
    "tests.fixtures.aws_iam",
    "tests.fixtures.aws_proxied",
    "tests.fixtures.github",
    "tests.fixtures.stack",
    "tests.fixtures.postgres",
    "tests.fixtures.vault_engines",
    "tests.fixtures.install",
    "tests.fixtures.otlp",
    "tests.fixtures.gateway",
    "tests.fixtures.oauth",
]
