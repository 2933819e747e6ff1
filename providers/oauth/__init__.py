"""The ``oauth`` provider type: per-session OAuth 2 access tokens that only the egress proxy holds."""
