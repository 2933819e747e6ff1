"""The per-session egress proxy's listener: the sandbox's only way out, and what runs it beside ``exec``.

``listener`` (``EgressProxy``) takes each client connection: a CONNECT to an allowed destination becomes a plain
tunnel copied by the kernel (``splice``), a CONNECT to a host the session's interceptor terminates goes to
``broker.egress.terminate``, a plain-HTTP request is forwarded or refused; every connection goes through the
session's ``Gate`` (``broker.egress.allowlist.gate``). ``thread`` runs a proxy on its own event loop in a thread of
the broker; ``bridge`` and ``forwarder`` carry the sandbox's connections out of its network namespace to the
proxy's socket; ``denials`` writes what the proxy refused (``egress.denied``, ``egress.refused``) when the session
ends.

Nothing here is imported by a session without a proxy but ``bridge`` (the thin client builds the sandbox's
command line with it: standard library only); import the modules themselves, this package re-exports nothing.
"""
