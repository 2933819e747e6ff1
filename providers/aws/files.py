"""The two files an AWS credential puts in the sandbox: the shared credentials file and the config file."""

from __future__ import annotations

from broker.vocab.secret import Secret


def credentials_file(access_key_id: str, secret: Secret, token: Secret) -> Secret:
    """``credentials``: the whole file is secret (it holds the secret key and the session token)."""
    return Secret(
        "[default]\n"
        f"aws_access_key_id = {access_key_id}\n"
        f"aws_secret_access_key = {secret.reveal()}\n"
        f"aws_session_token = {token.reveal()}\n"
    )


def config_file(region: str, endpoint_url: str | None) -> str:
    """``config``: region and endpoint, nothing secret."""
    lines = ["[default]", f"region = {region}"]
    if endpoint_url:
        lines.append(f"endpoint_url = {endpoint_url}")
    return "\n".join(lines) + "\n"
