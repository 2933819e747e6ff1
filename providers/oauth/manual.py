"""What docs/reference.md says of the ``oauth`` type: the keys its loaders read."""

from __future__ import annotations

from broker.vocab.manual import Key, ProviderManual

MANUAL = ProviderManual(
    summary="OAuth 2 access tokens, only behind the proxy (inject: proxy).",
    example="""\
# [providers.oauth]
# type = "oauth"
# token_url = "https://auth.example.com/oauth/token"
# revocation_url = "https://auth.example.com/oauth/revoke"   # RFC 7009; revoked at the session's end
# client_id = "broker"
# client_secret_file = "/etc/broker/oauth-client-secret"     # mode 0600
# refresh_token_file = "/etc/broker/oauth-refresh-token"     # mode 0600, rewritten when the token rotates
# proxy_hosts = ["mcp.example.com:443"]""",
    config=(
        Key("token_url", "https URL", True, "The authorisation server's token endpoint."),
        Key("client_id", "string", True, "The broker's client at the authorisation server."),
        Key(
            "grant",
            "refresh_token | client_credentials | jwt_bearer",
            False,
            "What the broker gets each token with.",
            "refresh_token",
        ),
        Key("client_secret_file", "path", False, "The client's secret (mode 0600): client_secret_basic."),
        Key("refresh_token_file", "path", False, "grant refresh_token: the operator's (0600; rewritten on rotation)."),
        Key("refresh_token_vault", "instance", False, "grant refresh_token: a vault instance keeping it in KV v2."),
        Key("refresh_token_path", "KV path", False, "With refresh_token_vault: the secret's path (secret_mount)."),
        Key("refresh_token_field", "name", False, "With refresh_token_vault: its field.", "refresh_token"),
        Key("assertion_key_file", "path", False, "grant jwt_bearer: the private key signing assertions (0600)."),
        Key("assertion_algorithm", "RS256 | PS256 | ES256 | EdDSA", False, "Its algorithm.", "RS256"),
        Key("assertion_issuer", "string", False, "The assertion's iss.", "client_id"),
        Key("assertion_subject", "string", False, "The assertion's sub (required with assertion_key_file)."),
        Key("assertion_audience", "string", False, "The assertion's aud.", "token_url"),
        Key("assertion_key_id", "string", False, "The assertion's kid header."),
        Key("revocation_url", "https URL", False, "RFC 7009: tokens are revoked at the session's end."),
        Key("introspection_url", "https URL", False, "RFC 7662: doctor asks whether the refresh token is active."),
        Key("ca_file", "path", False, "CAs trusted for the authorisation server.", "the system's"),
        Key("timeout", "seconds", False, "HTTP timeout.", "10"),
    ),
    manifest=(
        Key("scopes", "list", False, "oauth: 1 to 32 scope tokens, each within the grant's scopes."),
        Key("hosts", "list", False, "oauth: which of the instance's proxy_hosts the token is for.", "all of them"),
    ),
    grant=(Key("scopes", "list", False, "oauth: the scopes it allows, exactly; none listed: none."),),
)
