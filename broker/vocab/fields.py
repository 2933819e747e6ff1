"""Strict reading of parsed mappings, shared by the manifest, policy and config loaders.

``Fields`` wraps one mapping and the path that leads to it (``credentials[1]``);
every getter checks the type, every error names the full field path, and
``done()`` refuses the keys nobody asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from broker.vocab.durations import parse_duration, parse_long_duration
from broker.vocab.errors import BadInput
from broker.vocab.sizes import parse_size


def describe(value: object) -> str:
    """A short, safe description of a value's type for error messages."""
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
        type(None): "null",
    }
    return names.get(type(value), type(value).__name__)


def shown(value: str, limit: int = 40) -> str:
    """A value quoted for an error message: escaped, bounded in length."""
    text = value if len(value) <= limit else value[:limit] + "..."
    return repr(text)


_PLAIN_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,62}[\x21-\x7e])?")


def key_text(key: str) -> str:
    """A key as an error path shows it: short printable ASCII as is, anything else escaped and bounded.

    Keys come from untrusted documents; one holding terminal escapes or 10,000
    characters must not reach stderr as written.
    """
    return key if _PLAIN_KEY.fullmatch(key) else shown(key)


class Fields:
    """Typed, path-aware access to one mapping of untrusted data."""

    def __init__(self, data: object, path: str, error: type[BadInput]) -> None:
        if not isinstance(data, Mapping):
            raise error(f"{path or 'document'}: expected a mapping, got {describe(data)}")
        self._data: Mapping[str, Any] = data
        self._path = path
        self._error = error
        self._used: set[str] = set()

    def where(self, key: str) -> str:
        text = key_text(key)
        return f"{self._path}.{text}" if self._path else text

    def fail(self, key: str, message: str) -> BadInput:
        return self._error(f"{self.where(key)}: {message}")

    def has(self, key: str) -> bool:
        return key in self._data

    def raw(self, key: str, default: Any = None) -> Any:
        self._used.add(key)
        return self._data.get(key, default)

    def _get(self, key: str, required: bool) -> Any:
        self._used.add(key)
        if key not in self._data or self._data[key] is None:
            if required:
                raise self._error(f"{self.where(key)}: required")
            return None
        return self._data[key]

    def string(
        self,
        key: str,
        *,
        required: bool = True,
        pattern: re.Pattern[str] | None = None,
        max_len: int = 256,
        hint: str = "",
    ) -> str | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(key, f"expected a string, got {describe(value)}")
        if len(value) > max_len:
            raise self.fail(key, f"longer than {max_len} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(key, f"{shown(value)} is not valid{(' (' + hint + ')') if hint else ''}")
        return value

    def req_string(self, key: str, **kwargs: Any) -> str:
        value = self.string(key, required=True, **kwargs)
        assert value is not None
        return value

    def integer(
        self,
        key: str,
        *,
        required: bool = False,
        minimum: int | None = None,
        maximum: int | None = None,
    ) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {describe(value)}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be at most {maximum}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self._get(key, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true or false, got {describe(value)}")
        return value

    def duration(self, key: str, *, required: bool = False) -> int | None:
        value = self._get(key, required)
        if value is None:
            return None
        return parse_duration(value, self.where(key), self._error)

    def long_duration(self, key: str, default: int, *, allow_zero: bool) -> int:
        """Seconds for ``400d``, ``12h``, ``0s`` or an integer (``parse_long_duration``); ``default`` when absent."""
        value = self.raw(key)
        if value is None:
            return default
        return parse_long_duration(value, self.where(key), self._error, allow_zero=allow_zero)

    def size(self, key: str, *, required: bool = False) -> int | None:
        """Bytes for ``64MiB``, ``1GiB`` or an integer of bytes (``broker.vocab.sizes``)."""
        value = self._get(key, required)
        if value is None:
            return None
        return parse_size(value, self.where(key), self._error)

    def string_list(
        self,
        key: str,
        *,
        required: bool = True,
        pattern: re.Pattern[str] | None = None,
        min_items: int = 1,
        max_items: int = 500,
        max_len: int = 256,
        unique: bool = True,
        hint: str = "",
    ) -> tuple[str, ...] | None:
        value = self._get(key, required)
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, got {describe(value)}")
        if len(value) < min_items:
            raise self.fail(key, f"needs at least {min_items} item{'s' if min_items > 1 else ''}")
        if len(value) > max_items:
            raise self.fail(key, f"has more than {max_items} items")
        items: list[str] = []
        for index, item in enumerate(value):
            where = f"{key}[{index}]"
            if not isinstance(item, str):
                raise self.fail(where, f"expected a string, got {describe(item)}")
            if len(item) > max_len:
                raise self.fail(where, f"longer than {max_len} characters")
            if pattern is not None and not pattern.fullmatch(item):
                detail = f" ({hint})" if hint else ""
                raise self.fail(where, f"{shown(item)} is not valid{detail}")
            if unique and item in items:
                raise self.fail(where, f"{shown(item)} is listed twice")
            items.append(item)
        return tuple(items)

    def mapping(self, key: str, *, required: bool = True) -> Fields | None:
        value = self._get(key, required)
        if value is None:
            return None
        return Fields(value, self.where(key), self._error)

    def items(self) -> list[tuple[str, Any]]:
        """All entries (for free-form maps such as permissions); marks them used."""
        self._used.update(self._data.keys())
        return list(self._data.items())

    def list_of_mappings(self, key: str, *, min_items: int = 1, max_items: int = 64) -> list[Fields]:
        value = self._get(key, True)
        if not isinstance(value, list):
            raise self.fail(key, f"expected a list, got {describe(value)}")
        if len(value) < min_items:
            raise self.fail(key, f"needs at least {min_items} item{'s' if min_items > 1 else ''}")
        if len(value) > max_items:
            raise self.fail(key, f"has more than {max_items} items")
        return [Fields(item, f"{self.where(key)}[{i}]", self._error) for i, item in enumerate(value)]

    def done(self) -> None:
        """Refuse every key that no getter read."""
        unknown = sorted(str(k) for k in self._data if k not in self._used)
        if unknown:
            raise self._error(f"{self.where(unknown[0])}: unknown key")
