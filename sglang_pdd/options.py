"""Command-line flags declared on config dataclasses: a flag's name, help and default in one place.

A field declared with ``option(...)`` carries its flag in its metadata. ``add_options`` adds one
argparse argument per such field, whose default is the field's; ``options_from_args`` reads the
parsed values back as the dataclass's keyword arguments. Validation stays in the dataclass's
``__post_init__``: a ``ValueError`` naming the flag and the accepted values.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

_KEY = "sglang_pdd.option"


def option(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    flag: str | None = None,
    choices: typing.Sequence[Any] | None = None,
    type: typing.Callable[[str], Any] | None = None,
    action: str | None = None,
    repeat: bool = False,
    metavar: str | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field that is also a command-line flag.

    flag: its name (default: ``--`` and the field's name, ``_`` -> ``-``).
    type: what converts its value (default: the field's annotation when that is ``int`` or
        ``float``, ``X | None`` included; otherwise the string as given).
    action: argparse's; a bool field is ``store_true`` when its default is False and
        ``store_false`` when it is True (``flag="--no-relay"`` for ``enable_relay``).
    repeat: the flag may be given several times (``action="append"``); the field holds a tuple.
    Without a default the dataclass requires the field; the flag's default is then None (or no
    values, for a repeated flag) and ``__post_init__`` says what is missing.
    """
    meta = dict(
        help=help,
        flag=flag,
        choices=choices,
        type=type,
        action=action,
        repeat=repeat,
        metavar=metavar,
    )
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_KEY: meta}
    )


def _options(
    cls: type, flag_prefix: str = "--"
) -> typing.Iterator[tuple[dataclasses.Field, dict, str]]:
    """(field, its option metadata, its flag) for each field of ``cls`` declared with option();
    a flag not named explicitly is ``flag_prefix`` and the field's name, ``_`` -> ``-``."""
    for f in dataclasses.fields(cls):
        if _KEY in f.metadata:
            meta = f.metadata[_KEY]
            yield f, meta, meta["flag"] or flag_prefix + f.name.replace("_", "-")


def flags(cls: type, flag_prefix: str = "--") -> dict[str, str]:
    """Each field of ``cls`` that is a flag -> that flag (to name it in error messages)."""
    return {f.name: flag for f, _, flag in _options(cls, flag_prefix)}


def field_default(f: dataclasses.Field) -> Any:
    """The field's default (a fresh one from its factory), or ``dataclasses.MISSING``."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _value_type(hint: Any) -> Any:
    """int or float when ``hint`` is one of them (or it ``| None``), else None (a string)."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    kinds = [h for h in (typing.get_args(hint) if union else (hint,)) if h is not types.NoneType]
    return kinds[0] if len(kinds) == 1 and kinds[0] in (int, float) else None


def add_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    prefix: str = "",
    flag_prefix: str = "--",
) -> None:
    """Add one argument per option() field of ``cls`` to ``parser`` (or an argument group).

    Its value lands in ``args.<prefix><field name>`` (``prefix`` keeps nested configs' fields
    apart, e.g. ``"handoff."``); flags not named explicitly start with ``flag_prefix`` (e.g.
    ``"--pdd-"``). The help shows the default unless that is a bool, None, "", () or a
    repeated flag's.
    """
    hints = typing.get_type_hints(cls)
    for f, meta, flag in _options(cls, flag_prefix):
        default = field_default(f)
        kwargs: dict[str, Any] = {"dest": prefix + f.name, "help": meta["help"].replace("%", "%%")}
        if isinstance(default, bool) and not meta["repeat"]:
            kwargs["action"] = meta["action"] or ("store_false" if default else "store_true")
            kwargs["default"] = default
        else:
            if meta["repeat"]:
                kwargs["action"] = "append"
                kwargs["default"] = [] if default is dataclasses.MISSING else list(default)
            else:
                kwargs["action"] = meta["action"] or "store"
                kwargs["default"] = None if default is dataclasses.MISSING else default
                if kwargs["default"] not in (None, "", ()):
                    kwargs["help"] += " (default: %(default)s)"
            kwargs["type"] = meta["type"] or _value_type(hints[f.name])
            kwargs["choices"] = meta["choices"]
            # Choices name themselves; else the value is named as argparse names it from a flag.
            metavar = meta["metavar"] or (
                None if meta["choices"] else flag.lstrip("-").replace("-", "_").upper()
            )
            if metavar:
                kwargs["metavar"] = metavar
        parser.add_argument(flag, **kwargs)


def options_from_args(cls: type, args: argparse.Namespace, prefix: str = "") -> dict[str, Any]:
    """The keyword arguments of ``cls`` that its flags set (``prefix`` as given to add_options)."""
    kwargs = {}
    for f, meta, _ in _options(cls):
        value = getattr(args, prefix + f.name)
        kwargs[f.name] = tuple(value) if meta["repeat"] else value
    return kwargs
