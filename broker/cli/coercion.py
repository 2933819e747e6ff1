"""Option values coerced without pydantic: every cold ``broker`` process would otherwise pay for it.

typer (since its click fork) turns each option's value into its annotation
through a pydantic ``TypeAdapter``: importing pydantic and building one
adapter per option cost a cold ``broker issue`` about 200 ms of CPU before
anything was read, more than the provider calls on loopback. The broker's
options are only ``str``, ``Path``, ``bool``, ``list[str]`` and ``StrEnum``
choices (each possibly optional), which this module coerces itself; any
other annotation, and a typer without that layer, keep typer's own.
"""

from __future__ import annotations

import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any

import typer

_PLAIN = (str, Path)


def _inner(annotation: Any) -> Any:
    """``X`` for ``X | None`` (and ``Optional[X]``), else the annotation itself."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _coercer(annotation: Any) -> Any:
    """A function value -> coerced value for the annotations the broker uses, else None."""
    inner = _inner(annotation)
    if inner in _PLAIN:
        return inner
    if inner is bool:
        return _boolean
    if typing.get_origin(inner) is list and typing.get_args(inner) in ((str,), (Path,)):
        item = typing.get_args(inner)[0]
        return lambda value: [item(v) for v in (value if isinstance(value, list | tuple) else [value])]
    if isinstance(inner, type) and issubclass(inner, Enum) and all(isinstance(m.value, str) for m in inner):
        return lambda value: _choice(inner, value)
    return None


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "t", "yes", "y", "on"):
        return True
    if text in ("0", "false", "f", "no", "n", "off"):
        return False
    raise ValueError(f"{value!r} is not a valid boolean")


def _choice(kind: type[Enum], value: Any) -> Enum:
    if isinstance(value, kind):
        return value
    try:
        return kind(str(value))
    except ValueError:
        allowed = ", ".join(repr(m.value) for m in kind)
        raise ValueError(f"{str(value)!r} is not one of {allowed}") from None


def install() -> None:
    """Coerce the broker's option types directly (a no-op on a typer without pydantic coercion)."""
    parameter = getattr(getattr(typer, "core", None), "_TyperParameter", None)
    try:
        from typer._coercion import RuntimeParam
    except ImportError:  # an older typer: click's own types, no pydantic
        return
    if parameter is None or not hasattr(parameter, "get_runtime_param") or getattr(parameter, "_broker_plain", False):
        return  # a typer laid out otherwise keeps its own coercion

    class PlainRuntimeParam(RuntimeParam):
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            try:
                return _coercer(self.annotation)(value)
            except (TypeError, ValueError) as exc:
                raise typer.BadParameter(str(exc), ctx=ctx, param=param) from None

    typers_own = parameter.get_runtime_param

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            descriptor = self.type_descriptor
            if descriptor.file_annotation is None and _coercer(descriptor.annotation) is not None:
                self._runtime_param = PlainRuntimeParam(
                    annotation=descriptor.annotation, parameter_info=descriptor.parameter_info
                )
        return typers_own(self)

    parameter.get_runtime_param = get_runtime_param
    parameter._broker_plain = True
