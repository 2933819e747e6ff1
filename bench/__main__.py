"""``python -m bench``: the benchmark (``bench/main.py`` says what it measures)."""

import sys

from bench.main import main

raise SystemExit(main(sys.argv[1:]))
