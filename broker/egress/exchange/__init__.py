"""The words the proxy's listener and its terminated path share: the limits of one exchange, what the proxy
refuses itself and why (``refusals``), and reading and closing h11 streams within those limits (``streams``).

Standard library and h11 only; nothing here holds a session's state. Import the modules themselves, this
package re-exports nothing.
"""
