"""What touches the operating system: session directories, tmpfs mounts, the sandbox, process hardening.

Imports only ``broker.vocab``, so the OS-facing code can be read (and reviewed) on its own.
"""
