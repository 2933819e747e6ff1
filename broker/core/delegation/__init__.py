"""Delegation: a session's sandbox asks, on the session's own socket, for child sessions that only narrow it.

``coverage`` decides whether a child manifest is covered by its parent
session, credential by credential (each provider says what narrower means
for its credentials: the ``Narrowing`` capability); ``lineage`` reads a session's
ancestors from the store. Issuing a child is ``broker.core.delegating``; the
socket is ``broker.core.session_socket``.
"""
