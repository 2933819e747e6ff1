"""Containers as a sandbox kind: the engine's command line (``engine``) and the network namespace an allow-listed
container joins, with the forwarder serving it (``relay``)."""
