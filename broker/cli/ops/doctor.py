"""``broker doctor``: one line per check of the installation, ✓ or ✗ with what to fix."""

from __future__ import annotations

import os
import sys

from broker.cli.context import Invocation, echo, print_json
from broker.core.inputs.config import config_path
from broker.core.setup.doctor import run_doctor
from broker.daemon.health import check_daemon
from broker.vocab.checks import Check
from broker.vocab.errors import BadInput

OK_MARK = "✓"
BAD_MARK = "✗"
#: Separates a failed check's detail from what to do about it.
FIX_MARK = " — fix: "
GREEN, RED, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[1m", "\x1b[0m"


def doctor(run: Invocation, as_json: bool) -> None:
    report = run_doctor(config_path(run.config), check_daemon)
    if as_json:
        print_json(report.to_json())
    else:
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        for check in report.checks:
            echo(line(check, colour=colour))
    if not report.ok:
        raise BadInput(f"doctor: {len(report.failed)} of {len(report.checks)} checks failed")


def line(check: Check, *, colour: bool) -> str:
    mark = OK_MARK if check.ok else BAD_MARK
    if colour:
        mark = f"{GREEN if check.ok else RED}{BOLD}{mark}{RESET}"
    fix = f"{FIX_MARK}{check.fix}" if check.fix else ""
    return f"{mark} {check.name}: {check.detail}{fix}"
