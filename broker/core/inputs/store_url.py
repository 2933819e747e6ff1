"""The one check of a PostgreSQL store URL, for the config's ``store`` and ``audit --store`` alike.

A password may reach libpq from the URL's user part or from a ``password``
query parameter; either would sit in a config file, a shell history or a
process's arguments, so both are refused and the password must come from a
pgpass file. The URL is otherwise left to libpq.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

SHAPE = "expected postgresql://USER@HOST[:PORT]/DATABASE"


def store_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a store URL (without naming any secret in it), or None."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not parts.path.strip("/"):
        return SHAPE
    names = {name.strip().lower() for name, _ in parse_qsl(parts.query, keep_blank_values=True)}
    if parts.password is not None or "password" in names:
        return "no password in the URL"
    return None
