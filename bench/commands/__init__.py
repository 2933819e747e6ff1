"""The figures of the broker's own commands run as processes: cold start, issue and revoke against the floor,
concurrency, memory, sweep, the audit log, Vault dynamic secrets, the AWS leg.
"""
