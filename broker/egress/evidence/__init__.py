"""The ``egress.request`` records of a session's terminated requests: ``record`` (one request's), ``writer`` (its
writer thread) and ``budget`` (what one session's records may add to the log). Import the modules themselves,
this package re-exports nothing.
"""
