"""The session use cases (issue, revoke, renew, sweep, exec, status) and what they work with, in rooms.

At the top, the session verbs and the ``Broker`` they take; ``credential/``, one credential's own steps
the verbs share; ``running/``, what changes a session while its exec runs; ``inputs/``, what the broker
decides with (config, manifest, policy); ``store/``, what it remembers; ``setup/``, ``init`` and ``doctor``.
Never prints or exits and never imports ``broker.cli``; providers are reached through ``providers.base`` and
loaded by name from ``providers.registry``.
"""
