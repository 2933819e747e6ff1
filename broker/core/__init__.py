"""The session use cases (issue, revoke, renew, sweep, exec) and what they decide with (config, policy, store).

Never prints or exits and never imports ``broker.cli``; providers are reached through ``providers.base``
and loaded by name from ``providers.registry``.
"""
