"""The daemon's endpoints, one function per route, each making the same core call as the direct command for the
peer the kernel names: sessions (issue, revoke, status, renew, a running session's network), execs (an exec's
session started and held by its client's connection), approvals (list, approve, deny, wait, collect), service
(health, metrics, sweep, policy check). The command table names them (``broker.commands.table``); the dispatch
is ``broker.daemon.routes``.
"""
