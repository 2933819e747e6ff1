"""Scoped-credential broker: short-lived, narrow credentials for sandboxed agents."""

__version__ = "0.1.0"
