"""The fleet figures: several hosts on one PostgreSQL store, the fleet log in PostgreSQL, a revoke that lands on
the host holding the session.
"""
