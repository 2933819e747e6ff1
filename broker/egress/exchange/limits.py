"""``ProxyLimits``: what bounds one session's proxy, its connections, the heads and bodies it reads, its waits.

One value the proxy is built with and hands down to every part that reads or waits: the listener (connections,
heads, the plain tunnels' idle time), the allow-list at connect time (connect timeout, how many refused
destinations are counted) and the terminated path (bodies, answers held back, keep-alive).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProxyLimits:
    max_connections: int = 128
    max_head_bytes: int = 16 * 1024
    chunk: int = 32 * 1024
    body_chunk: int = 256 * 1024  # a read of a request or answer body inside a terminated tunnel
    connect_timeout: float = 10.0
    head_timeout: float = 30.0
    keepalive_timeout: float = 120.0  # a terminated tunnel waiting for its next request
    idle_timeout: float = 900.0
    max_denied_destinations: int = 256  # distinct refused destinations, and distinct refused requests, counted
    max_checked_answer: int = 1024 * 1024  # a guarded JSON answer held back and checked (Vault: wrap_info)
    max_discarded_body: int = 256 * 1024 * 1024  # the rest of a refused request's body read and dropped, at most
