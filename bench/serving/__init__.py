"""The figures of ``broker serve``: the daemon against the direct CLI and the floor, latency at a modelled round
trip, approvals and delegation, ``/metrics``.
"""
