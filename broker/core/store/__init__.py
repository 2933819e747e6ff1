"""The session store: what the broker remembers about sessions and credentials (no secrets)."""
