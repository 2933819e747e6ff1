"""The benchmark as a package: ``python -m bench`` (``scripts/bench``), one module per figure.

``main`` runs the figures and writes ``bench-results/``; ``common`` holds
settings, results and process helpers; ``local`` sets up broker installations
against the local stack (``devstack``); ``floor`` is the hand-written
launcher each issue/revoke figure is compared with; ``seed``, ``profiling``
and ``egress`` are helpers and a standalone figure (``tunnels`` holds its
throughput rounds, ``relay.c`` the C relay it compares the proxy with).
Not installed.
"""
