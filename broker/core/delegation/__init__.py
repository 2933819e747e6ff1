"""Delegation: a session's sandbox asks, on the session's own socket, for child sessions that only narrow it.

``session_socket`` serves a delegating session's ``broker.sock`` while its
exec runs; ``delegating`` issues a child on it (``broker.core.issuing``, into
its parent's directory); ``coverage`` decides whether a child manifest is
covered by its parent session, credential by credential (each provider says
what narrower means for its credentials: the ``Narrowing`` capability);
``budget`` counts the children a session tree asks for and ``records`` logs
what the socket refuses, bounded. A session's ancestors are the store's
(``broker.core.store.lineage``).
"""
