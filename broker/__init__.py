"""Scoped-credential broker: short-lived, narrow credentials for sandboxed agents."""

__version__ = "0.1.0"

import warnings as _warnings

# Every way in (the console script, ``python -m broker``, ``python -m broker.cli``, the daemon) imports this
# package first, so the filter is set before any thread starts; see broker.entry.quiet_library_warnings.
_warnings.filterwarnings("ignore", module=r"urllib3\.contrib\.socks")
