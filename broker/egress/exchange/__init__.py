"""The parts of one exchange through the proxy that the listener and the terminated path share (``streams``).
Import the modules themselves, this package re-exports nothing.
"""
