"""Structured files: YAML, TOML or JSON read by suffix, bounded and strict (configs, tuning
models, plans and timelines all start here).

Input is hostile: the file is size-checked before it is read, duplicate keys and JSON's NaN and
Infinity are refused, and YAML aliases may not expand past a bound. Every error is one
:class:`pptl.errors.InputError` line naming the file.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pptl.errors import InputError
from pptl.fileio import MAX_FILE_BYTES, read_bounded, utf8_text
from pptl.formats._quote import quoted

__all__ = ["read_structured", "parse_json", "STRUCTURED_SUFFIXES"]


#: The suffixes :func:`read_structured` reads (a ``.json.gz`` reads as ``.json``).
STRUCTURED_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


def read_structured(path: str | Path) -> Any:
    """Parse a YAML, TOML or JSON (``.json`` or gzipped ``.json.gz``) file by its suffix; raise
    InputError with the file and reason."""
    path = Path(path)
    # .json.gz gunzipped (bounded), as every other pptl reader of JSON takes it: a gzip file named
    # .json is told to take that name, which must then read here too
    gz = path.name.lower().endswith(".json.gz")
    raw = read_bounded(path, MAX_FILE_BYTES, gunzip=gz)
    suffix = ".json" if gz else path.suffix.lower()
    if suffix and suffix not in STRUCTURED_SUFFIXES:  # a figure (.png, .pdf) is named by its suffix, not as "not UTF-8 text"
        raise InputError(f"{path}: unknown file type '{suffix}', expected .yaml, .yml, .toml, .json or .json.gz")
    text = utf8_text(raw, path)
    if suffix in STRUCTURED_SUFFIXES and not text.strip():
        raise InputError(f"{path}: the file is empty")
    try:
        if suffix == ".toml":
            import tomllib

            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.load(text, Loader=_UniqueKeyLoader)
            if data is None:  # comments only: as empty as an empty TOML or JSON file
                raise InputError("the file is empty")
            _check_aliases(data)
            return data
        if suffix == ".json":
            return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    except Exception as e:  # each parser has its own error type; all mean "not valid"
        mark = getattr(e, "problem_mark", None)  # YAML: where the parser stopped
        if mark is not None:
            problem = getattr(e, "problem", None) or type(e).__name__
            raise InputError(f"{path}: not valid YAML at line {mark.line + 1}, column {mark.column + 1}: "
                             f"{problem}") from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not valid {suffix[1:].upper()}: {first}") from None
    raise InputError(f"{path}: unknown file type '{suffix}', expected .yaml, .yml, .toml, .json or .json.gz")


def parse_json(text: str, path: str | Path) -> Any:
    """JSON text as :func:`read_structured` reads a ``.json`` file: duplicate keys, NaN and
    Infinity refused, each error one line naming ``path``."""
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None
    except ValueError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not valid JSON: {first}") from None


#: Values a YAML document may expand to once its aliases are followed (a legit config has hundreds).
_MAX_YAML_VALUES = 1_000_000


def _check_aliases(data: Any) -> None:
    """Refuse YAML whose aliases make it huge once expanded ("billion laughs": nine lines of
    ``&a [*b, *b, ...]`` are 10**9 values to anything that walks or writes them) or make it
    contain itself. Shared nodes are counted once per use, each distinct node visited once."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(x: Any) -> int:
        if not isinstance(x, (list, dict)):
            return 1
        key = id(x)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise InputError("an alias refers to a value that contains it (a cycle)")
        active.add(key)
        total = 1 + sum(size(v) for v in (x.values() if isinstance(x, dict) else x))
        active.discard(key)
        if total > _MAX_YAML_VALUES:
            raise InputError(f"aliases expand it to more than {_MAX_YAML_VALUES:,} values")
        sizes[key] = total
        return total

    size(data)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise InputError(f"duplicate key {quoted(k)}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise InputError(f"'{name}' is not a number JSON allows")


def _make_unique_loader() -> type:
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no type stubs
        pass

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict[Any, Any]:
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:
                raise InputError(f"line {key_node.start_mark.line + 1}: a key must be a plain value") from None
            if key in out:
                raise InputError(f"line {key_node.start_mark.line + 1}: duplicate key {quoted(key)}")
            out[key] = loader.construct_object(value_node, deep=deep)
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    # YAML 1.2 numbers: PyYAML follows YAML 1.1, where an exponent needs a dot and a sign ("2.0e+7"),
    # so "2.0e7" and "1e-3" would be text; JSON, TOML and every YAML 1.2 reader take them as numbers.
    import re

    Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                                 re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
                                 list("-+0123456789."))
    return Loader


class _LazyLoader:
    _cls: type | None = None

    def __call__(self, stream: Any) -> Any:
        if _LazyLoader._cls is None:
            _LazyLoader._cls = _make_unique_loader()
        return _LazyLoader._cls(stream)


_UniqueKeyLoader = _LazyLoader()
