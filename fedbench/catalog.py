"""What `fedbench list` shows: every registered thing with its parameters, their defaults and their docs.

A parameter's documentation is where its owner wrote it: the docstring under a `Config` or dataclass field
(read from the source, since Python keeps no such docstrings at run time), or the `Args:` section of a
loader's or factory's docstring. There is no second place where defaults or citations live.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

from fedbench.core.errors import UnknownNameError
from fedbench.core.fields import signature_fields
from fedbench.core.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS, SHIFTS, Registry

KINDS: dict[str, tuple[Registry, int]] = {
    "datasets": (DATASETS, 1),
    "models": (MODELS, 2),
    "algorithms": (ALGORITHMS, 0),
    "partitions": (PARTITIONS, 0),
    "shifts": (SHIFTS, 0),
}
"""Kind -> (registry, leading positional parameters of the registered callable that are not user parameters)."""


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    default: str
    doc: str


def summary(obj: Any) -> str:
    """The first paragraph of `obj`'s docstring, joined into one line (never cut mid-sentence)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def parameters(kind: str, name: str) -> list[Parameter]:
    """The user parameters of registered `name` of `kind`: its Config's fields or its callable's keywords."""
    registry, skip = KINDS[kind]
    entry = registry.get(name, field=kind)
    target = getattr(entry, "Config", entry)
    docs = field_docs(target) if isinstance(target, type) else args_docs(target)
    out = []
    for field, (annotation, default) in signature_fields(target, skip).items():
        shown = "required" if default in (inspect.Parameter.empty, dataclasses.MISSING) else repr(default)
        out.append(Parameter(field, _type_name(annotation), shown, docs.get(field, "")))
    return out


def field_docs(cls: type) -> dict[str, str]:
    """{field: the docstring written under it} for a dataclass and its bases (a subclass's own wins)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):
            continue
        body = tree.body[0].body
        for node, after in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _is_string(after):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def args_docs(fn: Callable) -> dict[str, str]:
    """{parameter: its description} from a Google-style `Args:` section."""
    doc = inspect.getdoc(fn) or ""
    section = re.split(r"\n(?:Returns|Raises|Yields|Example|Examples|Note):", doc.partition("Args:")[2])[0]
    docs: dict[str, str] = {}
    current = None
    for line in section.splitlines():
        match = re.match(r"\s{0,8}(\w+)(?: \(.*?\))?: (.*)", line)
        if match:
            current = match.group(1)
            docs[current] = match.group(2).strip()
        elif current and line.strip():
            docs[current] += " " + line.strip()
    return docs


def resolve_kind(text: str) -> str:
    """A kind as the user wrote it (`algorithm`, `algorithms`) -> its key in KINDS."""
    kind = text if text in KINDS else text + "s"
    if kind not in KINDS:
        raise UnknownNameError("kind", text, KINDS, field="list")
    return kind


def _is_string(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    return text or str(annotation).replace("typing.", "")
