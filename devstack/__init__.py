"""The local stack, defined once: an OpenBao dev server, a moto server, the GitHub App emulator, the broker config.

The tests (through the thin pytest wrappers in ``tests/fixtures``), ``scripts/demo``
(``python -m devstack.demo``) and the bench (``python -m bench``) all start the
same servers with the same roles, keys, policy and task from here. It is not
installed (``pyproject.toml`` packages only ``broker`` and ``providers``) and
nothing installed imports it; run it from the repository root.
"""
