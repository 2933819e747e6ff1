"""The per-session egress proxy's listener: the sandbox's only way out, and what runs it beside ``exec``.

``listener`` (``EgressProxy``), ``splice`` (plain tunnels copied by the kernel), ``thread`` (the proxy's event
loop in a thread of the broker), ``bridge`` and ``forwarder`` (into the sandbox's network namespace), ``denials``
(``egress.denied``, ``egress.refused``). Import the modules themselves, this package re-exports nothing.
"""
