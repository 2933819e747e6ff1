"""Delegation: a session's sandbox asks, on the session's own socket, for child sessions that only narrow it.

``delegating`` issues a child (``broker.core.issuing``, into its parent's
directory) once ``coverage`` finds it covered by its parent session,
credential by credential (each provider says what narrower means for its
credentials: the ``Narrowing`` capability); ``budget`` counts the children a
session tree asks for and ``records`` logs what is refused, bounded. The
socket they are asked on is a part of the running session
(``broker.core.running.session_socket``); a session's ancestors are the
store's (``broker.core.store.lineage``).
"""
