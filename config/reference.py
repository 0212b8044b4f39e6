"""``python -m config.reference [--write]``: the catalog and environment file reference, generated
from the pydantic schema (``config.schema``) so that it is never written twice.

Each field gets its type, its default (or "required"), its constraints, its description, and the
message ``make check`` prints for a value that breaks the field's own rule. That message is not
written here: the generator validates an invalid value of the field against its model and quotes
the answer at that field (what the loader prints after the file and entry name). The checks
across fields and files that ``make check`` also runs (a rank above the base's limit, a dataset
file's rows, a schema file) name their entry in the same way; docs/add-an-adapter.md lists them.

``tests/docs/test_docs.py`` fails when ``docs/catalog-reference.md`` differs from this output, or
the error table of ``docs/router.md`` from the router's error catalogue (``contracts.errors``).
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from config.schema import AdapterEntry, BaseModelEntry, Catalog, Environment
from contracts import errors

OUT = Path(__file__).resolve().parents[1] / "docs" / "catalog-reference.md"

#: The files and their root models, in the order a user meets them.
ROOTS: tuple[tuple[str, type[BaseModel], str], ...] = (
    (
        "config/adapters.yaml",
        Catalog,
        "The catalog: the base models and the adapters every environment serves.",
    ),
    (
        "config/adapters.yaml: one entry of `adapters`",
        AdapterEntry,
        "One adapter: what it is trained on, how, who may call it, how it is served.",
    ),
    (
        "config/adapters.yaml: one value of `base_models`",
        BaseModelEntry,
        "A base model the adapters are trained on and served over.",
    ),
    (
        "config/environments/NAME.yaml",
        Environment,
        "An environment: where it runs and with which serving, cache, router and network.",
    ),
)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """The annotation without ``None`` in a union, and whether ``None`` was allowed."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        if len(args) == 1:
            return args[0], optional
        return typing.Union[tuple(args)], optional  # noqa: UP007
    return annotation, False


def type_name(annotation: Any) -> str:
    inner, optional = _unwrap(annotation)
    origin = get_origin(inner)
    if origin is Literal:
        text = " \\| ".join(json.dumps(a) for a in get_args(inner))
    elif isinstance(inner, type) and issubclass(inner, enum.Enum):
        text = " \\| ".join(json.dumps(m.value) for m in inner)
    elif isinstance(inner, type) and issubclass(inner, BaseModel):
        text = f"[{inner.__name__}](#{inner.__name__.lower()})"
    elif origin in (list, tuple):
        text = f"list of {type_name(get_args(inner)[0])}"
    elif origin is dict:
        key, value = get_args(inner)
        text = f"map of {type_name(key)} to {type_name(value)}"
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(type_name(a) for a in get_args(inner))
    elif isinstance(inner, type):
        text = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            inner.__name__, inner.__name__
        )
    else:
        text = str(inner)
    return f"{text} (or null)" if optional else text


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    factory = info.default_factory
    value = factory() if factory is not None else info.default  # type: ignore[call-arg]
    if isinstance(value, BaseModel):
        changed = value.model_dump(exclude_defaults=True)
        return f"`{json.dumps(changed)}`" if changed else "its fields' defaults"
    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{json.dumps(value)}`"


def constraints(info: FieldInfo) -> list[str]:
    out = []
    for m in info.metadata:
        for cls, word, attr in (
            (Gt, ">", "gt"),
            (Ge, ">=", "ge"),
            (Lt, "<", "lt"),
            (Le, "<=", "le"),
        ):
            if isinstance(m, cls):
                out.append(f"{word} {getattr(m, attr)}")
        if isinstance(m, MinLen):
            out.append(f"length >= {m.min_length}")
        if isinstance(m, MaxLen):
            out.append(f"length <= {m.max_length}")
        if (pattern := getattr(m, "pattern", None)) is not None:
            out.append(f"matches `{pattern}`")
    return out


def _candidates(info: FieldInfo) -> list[Any]:
    """Values to try against a field, the one its own constraint names first."""
    out: list[Any] = []
    for m in info.metadata:
        if isinstance(m, Gt):
            out.append(m.gt)
        elif isinstance(m, Ge):
            out.append(m.ge - 1)
        elif isinstance(m, Lt):
            out.append(m.lt)
        elif isinstance(m, Le):
            out.append(m.le + 1)
        elif isinstance(m, MinLen) and m.min_length > 0:
            out.append("")
    return [*out, "not valid!", "unknown", ["a", "list"], "many", "a string"]


def error_for(model: type[BaseModel], name: str, info: FieldInfo) -> tuple[str, str]:
    """(the bad value as YAML would show it, the message for it): validated against ``model``
    itself, so the field's own validators answer too; only the error at the field is kept."""
    alias = info.alias or name
    tries: list[tuple[bool, Any]] = [(True, None)] if info.is_required() else []
    tries += [(False, v) for v in _candidates(info)]
    for omitted, value in tries:
        try:
            model.model_validate({} if omitted else {alias: value})
        except ValidationError as exc:
            mine = [e for e in exc.errors() if e["loc"][:1] == (alias,)]
            if mine:
                message = mine[0]["msg"].removeprefix("Value error, ")
                return ("(left out)" if omitted else f"`{json.dumps(value)}`"), message
    raise AssertionError(f"{model.__name__}.{name}: no value tried was refused")


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """``root`` and every model its fields name, depth first, each once."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for info in model.model_fields.values():
            for arg in _flatten(info.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    visit(arg)

    visit(root)
    return seen


def _flatten(annotation: Any) -> list[Any]:
    args = get_args(annotation)
    return [annotation, *(a for arg in args for a in _flatten(arg))]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def model_section(model: type[BaseModel]) -> list[str]:
    doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
    lines = [f"### {model.__name__}", ""]
    if doc and not doc.startswith(("A base class", "Usage docs")):
        lines += [doc, ""]
    lines += [
        "| field | type | default | rule | description | `make check` on a bad value |",
        "|---|---|---|---|---|---|",
    ]
    for name, info in model.model_fields.items():
        value, message = error_for(model, name, info)
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{name}`",
                    type_name(info.annotation),
                    default_text(info),
                    _cell(", ".join(constraints(info))),
                    _cell(info.description or ""),
                    _cell(f"{value}: {message}"),
                ]
            )
            + " |"
        )
    return [*lines, ""]


def render() -> str:
    lines = [
        "# Catalog reference",
        "",
        "<!-- Generated by `python -m config.reference --write` from config/schema.py; "
        "do not edit. -->",
        "",
        "Every field of the catalog and environment files, generated from the pydantic schema "
        "(`config/schema.py`). An unknown field is refused. The last column is what "
        "`make check` prints, after the file and the entry's name, for a value that breaks "
        "the field's own rule (produced by validating that value while this page was "
        "generated). Checks across fields and files (a rank above the base's limit, a "
        "dataset's rows, a JSON schema file) are in [Add an adapter](add-an-adapter.md).",
        "",
    ]
    done: set[type[BaseModel]] = set()
    for title, root, what in ROOTS:
        lines += [f"## {title}", "", what, ""]
        for model in _models(root):
            if model in done:
                continue
            done.add(model)
            lines += model_section(model)
    return "\n".join(lines).rstrip() + "\n"


#: The router's page, whose error table is the error catalogue (``contracts.errors``), between
#: these two markers.
ROUTER_DOC = OUT.with_name("router.md")
ERRORS_BEGIN, ERRORS_END = "<!-- errors: generated -->", "<!-- errors: end -->"


def router_doc() -> str:
    """docs/router.md with its error table as the catalogue writes it."""
    text = ROUTER_DOC.read_text()
    head, _, rest = text.partition(ERRORS_BEGIN)
    _, _, tail = rest.partition(ERRORS_END)
    return f"{head}{ERRORS_BEGIN}\n{errors.markdown_table()}\n{ERRORS_END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m config.reference", description=__doc__)
    ap.add_argument(
        "--write",
        action="store_true",
        help=f"write {OUT.name} and the error table of {ROUTER_DOC.name} instead of printing",
    )
    args = ap.parse_args(argv)
    text = render()
    if args.write:
        OUT.parent.mkdir(parents=True, exist_ok=True)
        OUT.write_text(text)
        ROUTER_DOC.write_text(router_doc())
        print(f"wrote {OUT} and {ROUTER_DOC}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
