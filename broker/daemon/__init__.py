"""``broker serve``: the broker as a long-lived service on a Unix socket (SPEC.md, "Daemon mode").

``server`` owns the socket and the lifecycle (the accept loop of ``broker.host.serving``, SIGTERM, the sweep
timer), ``routes`` the dispatch made from the command table's routes, ``endpoints`` one function per route making
the same core call as the direct CLI, ``peer`` names the caller from ``SO_PEERCRED``.
"""
