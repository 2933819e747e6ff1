"""``broker serve``: the broker as a long-lived service on a Unix socket (SPEC.md, "Daemon mode").

``server`` owns the socket and the lifecycle (accept, SIGTERM, the sweep timer),
``wire`` speaks HTTP/1.1 with h11, ``routes`` maps each endpoint to the same
core call as the direct CLI, ``peer`` names the caller from ``SO_PEERCRED``.
"""
