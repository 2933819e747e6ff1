"""The gateway: one HTTP proxy for many sessions, each request's session named by its proxy credential.

``listener`` (``Gateway``) accepts on a TCP listener (TLS off loopback) and serves every session's connections on
one event loop: it reads a connection's first request head, answers the gateway's own routes, checks the request's
``Proxy-Authorization`` (407 otherwise) and hands the connection to that session's ``EgressProxy``
(``broker.egress.proxy.listener``), so everything the per-session proxy does is done per session here. ``passes``
is the proxy credential (its secret, the keyed hash the gateway keeps, the Basic header's reading); ``seat`` is
one session on the gateway, which the running session holds as it would its own proxy thread.

Import the modules themselves; this package re-exports nothing.
"""
