"""Sizes in the config: binary units only, one spelling each, and a clear line for anything else."""

from __future__ import annotations

import pytest

from broker.vocab.errors import ConfigError
from broker.vocab.sizes import format_size, parse_size


@pytest.mark.parametrize(
    ("value", "size"), [(0, 0), (4096, 4096), ("0", 0), ("512KiB", 512 << 10), ("64MiB", 64 << 20), ("1GiB", 1 << 30)]
)
def test_sizes_parse(value: object, size: int) -> None:
    assert parse_size(value, "audit.min_free", ConfigError) == size


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("64MB", "'64MB' is not a size (a whole number followed by KiB, MiB, GiB or TiB)"),
        ("1.5GiB", "is not a size"),
        ("64 MiB", "is not a size"),
        ("-1", "is not a size"),
        (-1, "must not be negative"),
        (True, "got a boolean"),
        (1.5, "expected a size such as 64MiB or 1GiB"),
        ("2048TiB", "larger than the 1024TiB the broker accepts"),
        ("9" * 5000, "is not a size"),
    ],
)
def test_anything_else_is_one_line_naming_the_key(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match="^audit.min_free: ") as raised:
        parse_size(value, "audit.min_free", ConfigError)
    assert message in raised.value.message and len(raised.value.message) < 160


def test_sizes_print_in_their_largest_exact_unit() -> None:
    assert [format_size(n) for n in (0, 1023, 1 << 10, 64 << 20, 1 << 30, 1536000)] == [
        "0B",
        "1023B",
        "1KiB",
        "64MiB",
        "1GiB",
        "1.5MiB",
    ]
