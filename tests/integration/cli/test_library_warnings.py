"""A library's warning never reaches the broker's stderr, where an error is one line.

The race it was: requests (under hvac) silences urllib3's "SOCKS support requires PySocks" warning as it loads,
while botocore loads inside ``warnings.catch_warnings()``; when the warm-up threads load both at once, botocore's
block restores the filters without requests' one, and a later load of urllib3's SOCKS module printed the warning
before the broker's own error line. The test replays that order in one thread, so it does not depend on timing.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

REPLAY = textwrap.dedent(
    """
    import sys, warnings
    if sys.argv[1] == "broker":
        import broker  # every way in (python -m broker.cli, the console script, the daemon) imports the package
    with warnings.catch_warnings():  # botocore's block, open while requests loads in another thread
        import requests  # noqa: F401  (its own filter for the warning is set inside the block, and lost with it)
    try:
        import urllib3.contrib.socks  # noqa: F401  (what requests.adapters tries)
    except ImportError:
        pass
    """
)


def replay(setup: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, setup], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_socks_warning_the_race_printed_stays_off_stderr() -> None:
    if importlib.util.find_spec("socks") is not None:
        pytest.skip("PySocks is installed: urllib3 has no warning to give")
    assert "SOCKS support" in replay("plain")  # the race's order prints it without the broker's filter
    assert replay("broker") == ""
