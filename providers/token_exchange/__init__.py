"""The ``token_exchange`` provider type: a session's token of the broker's issuer exchanged (RFC 8693) for an access
token, which stays behind the proxy."""
