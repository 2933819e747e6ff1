"""What docs/reference.md says of the ``token_exchange`` type: its endpoint, the subject token's audience, scopes."""

from __future__ import annotations

from broker.vocab.manual import Key, ProviderManual

MANUAL = ProviderManual(
    summary=(
        "A session's token of the broker's issuer exchanged (RFC 8693) for a short-lived access token, which goes"
        " only by the proxy (inject: proxy) and is renewed behind the same placeholder before it ends."
    ),
    example="""\
# [providers.modelx]
# type = "token_exchange"
# token_endpoint = "https://auth.model.example/oauth/token"
# audience = "https://api.model.example"     # the subject token's aud
# ca_file = "/etc/broker/internal-ca.pem"    # trust for token_endpoint; the system's otherwise
# proxy_hosts = ["api.model.example:443\"]""",
    config=(
        Key("token_endpoint", "URL", True, "The RFC 8693 token endpoint: https, http only to loopback."),
        Key("audience", "string", True, "The aud of the session token sent as the subject token."),
        Key("ca_file", "path", False, "CA bundle trusted for token_endpoint.", "the system's"),
        Key("client_id", "string", False, "Sent as client_id, for an endpoint that wants a public client's id."),
        Key(
            "jwks_url",
            "URL",
            False,
            "Where the endpoint reads the broker's keys, for broker doctor to compare; none: keys were uploaded.",
        ),
        Key("timeout", "seconds", False, "HTTP timeout.", "10"),
    ),
    manifest=(Key("scopes", "list", False, "token_exchange: the scopes asked for (the exchange's scope)."),),
    grant=(Key("scopes", "list", False, "token_exchange: the scopes a rule allows (none: none may be asked)."),),
)
