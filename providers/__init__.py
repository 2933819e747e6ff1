"""Credential providers: one module per provider type behind ``providers.base.Provider``."""
