"""The broker as an OpenID Connect issuer (``[identity]``): its key, its tokens, what it publishes.

``keys`` (the key in a file) and ``transit`` (the key in Vault's transit
engine) sign; ``issuer`` makes the tokens (``Issuer``, the ``TokenIssuer`` the
providers that sign are handed); ``documents`` and ``wellknown`` are what
verifiers read: the discovery document, the JWKS, the revocation list.
"""
