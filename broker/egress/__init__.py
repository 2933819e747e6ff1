"""Egress: which network destinations a session may reach, and the per-session proxy that enforces it."""
