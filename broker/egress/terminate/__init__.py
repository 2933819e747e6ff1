"""The terminated-host request path of the egress proxy: every request to a host the proxy terminates TLS for.

A host is terminated when an ``inject: proxy`` credential goes there or the
session's ``operations`` limit it (``interceptor.Interceptor`` knows which,
holds the session's injectors and operations, the session CA (``ca``) and
the upstream trust). Inside the tunnel (``tunnel``) requests follow one
another on the client's connection, each a ``cycle.Cycle``: the framing
(``framing``) and the guards (``guards``), the operations decision (the body
held when it decides), the credential step (the first injector of the host
that takes the request: ``broker.egress.injectors``), forwarding over a kept
upstream connection (``upstream``, opened through the session's ``Gate``),
the answer relayed (``relay``) with the secrets masked (``masking``), and one
``egress.request`` record (``broker.egress.evidence``). ``answers`` holds
the proxy's own answers, ``outgoing`` what waits for the next write
upstream.

The listener (``broker.egress.proxy``) calls in here and nothing here calls
back into it: what a tunnel needs of the proxy around it (its limits, where
it may connect, the refusal tally) is the ``Gate`` it is handed. Nothing
here is imported until a host is terminated (the session CA needs
``cryptography``); import the modules themselves, this package re-exports
nothing.
"""
