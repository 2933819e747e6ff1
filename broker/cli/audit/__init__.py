"""``broker audit ...``: the auditor's commands, each named in the command table (``broker.commands.table``).

Checking the log is ``verifying``; reading it (``list``, ``lookup``,
``active``) is ``reading``; its keys are ``keys``; what a fleet adds (its log
in PostgreSQL, every host's keys, ``export``) is ``fleet``.
"""
