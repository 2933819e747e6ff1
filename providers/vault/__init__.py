"""The ``vault`` provider: Vault or OpenBao tokens with exactly the requested policies, and dynamic secrets."""
