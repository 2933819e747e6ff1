"""Reading a task file's bytes, apart from the manifest's parsing, so the daemon's thin client stays light.

The thin client reads the manifest with its caller's rights and sends it as
JSON; it needs this and ``strictdata``, not the config or the provider
vocabulary that ``broker.core.inputs.manifest`` checks a manifest against.
"""

from __future__ import annotations

import sys
from pathlib import Path

from broker.vocab.errors import ManifestError
from broker.vocab.files import read_regular_file

MAX_MANIFEST_BYTES = 64 * 1024


def read_manifest_bytes(source: str) -> tuple[bytes, bool]:
    """The manifest's bytes (``-`` reads stdin) and whether to parse it as JSON.

    A file must be a regular file (a symbolic link to one is followed: its
    content is never echoed); a FIFO, a device or a directory is refused
    without reading it.
    """
    if source == "-":
        return sys.stdin.buffer.read(MAX_MANIFEST_BYTES + 1), False
    data, _ = read_regular_file(source, what="task file", max_bytes=MAX_MANIFEST_BYTES, error=ManifestError)
    return data, Path(source).suffix.lower() == ".json"
