"""Option values reach the commands as their annotated types without pydantic (a cold start's CPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.brokerenv import BrokerEnv

ROOT = Path(__file__).resolve().parents[3]


def test_a_session_command_coerces_its_options_without_importing_pydantic(broker_env: BrokerEnv) -> None:
    code = (
        "import sys\n"
        "from broker.cli.app import main\n"
        f"code = main(['--config', {str(broker_env.config_path)!r}, '--log-format', 'json', 'status', '--json'])\n"
        "print(code, 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stderr


def test_the_coerced_values_have_the_annotated_types() -> None:
    from enum import StrEnum

    from broker.cli.coercion import _coercer

    class Kind(StrEnum):
        a = "a"

    assert _coercer(str | None)("x") == "x"
    assert _coercer(Path | None)("/x") == Path("/x")
    assert _coercer(list[str])(("a", "b")) == ["a", "b"]
    assert _coercer(Kind | None)("a") is Kind.a
    assert _coercer(bool)("false") is False
    assert _coercer(int) is None  # typer's own coercion
