"""The ``identity`` provider type: a session's own token, signed by the broker as an OpenID Connect issuer."""
