"""The terminated-host request path of the egress proxy: every request to a host the proxy terminates TLS for.

A host is terminated when an ``inject: proxy`` credential goes there or the
session's ``operations`` limit it (``plan.Interceptor`` knows which, holds the
session CA and the upstream trust). Inside the tunnel (``tunnel``) requests
follow one another on the client's connection, each a ``request.Cycle``:
guards, the operations decision (the body held when it decides), the
credential step (``injector``: the interface a credential's way in
implements; the GitHub and Vault header swap is ``broker.egress.injectors.swap``),
forwarding over a kept upstream connection (``upstream``), the answer
relayed with the secrets masked, and one ``egress.request`` record
(``evidence``) appended by a writer thread (``writer``) with back-pressure.
``answers`` holds the proxy's own answers.

Nothing here is imported until a host is terminated (the session CA needs
``cryptography``); import the modules themselves, this package re-exports
nothing.
"""
