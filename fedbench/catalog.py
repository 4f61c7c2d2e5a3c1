"""What `fedbench list` shows: every registered thing with its parameters, their defaults and their docs.

A parameter's documentation is where its owner wrote it: the docstring under a `Config` or dataclass field
(read from the source, since Python keeps no such docstrings at run time), or the `Args:` section of a
loader's or factory's docstring. There is no second place where defaults or citations live.

Reading that means importing every registered module, and with them torch and scikit-learn: seconds, for a
listing that depends on nothing but fedbench's own source files (and the Python version, which prints the
types). So the listing of fedbench's own entries is kept as JSON under `cache_dir()/catalog`, named by a
digest of the Python version, of every source file of the package and of the names installed packages
declare as entry points: any edit or install gives a new name, the first `list` after it builds the file
(slow, as before), later ones read it and import none of those modules. What fedbench's sources do not
decide is read live, as before: entries of installed packages (their code is not in the digest; a built-in
name one of them also declares too, though it keeps its built-in meaning), `module:attribute` names and
unknown names (whose message lists the known ones). Reading the sources statically instead would not be
exact: defaults and types are shown as Python prints the objects (`1e-3` is 0.001, inherited fields).
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import importlib.metadata
import inspect
import json
import os
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedbench.core.cache import cache_dir
from fedbench.core.errors import UnknownNameError
from fedbench.core.fields import signature_fields
from fedbench.core.registry import ALGORITHMS, BACKENDS, DATASETS, MODELS, PARTITIONS, SHIFTS, Registry


@dataclass(frozen=True)
class Kind:
    registry: Registry
    skip: int = 0
    """Leading positional parameters of the registered callable that are not user parameters."""
    set_through: str = ""
    """Where a task sets this kind's options when its entries take no parameters of their own."""


KINDS: dict[str, Kind] = {
    "datasets": Kind(DATASETS, skip=1),
    "models": Kind(MODELS, skip=2),
    "algorithms": Kind(ALGORITHMS),
    "partitions": Kind(PARTITIONS),
    "shifts": Kind(SHIFTS),
    "backends": Kind(BACKENDS, set_through="resources (client_cpus, client_gpus, clients_per_pass)"),
}


@dataclass(frozen=True)
class Parameter:
    name: str
    type: str
    default: str
    doc: str


@dataclass(frozen=True)
class Listed:
    """One registered entry as `list` shows it."""

    name: str
    summary: str
    parameters: tuple[Parameter, ...]
    capabilities: tuple[str, ...] = ()
    """An algorithm's capabilities beyond the core (`fedbench.algorithms.capabilities`); empty for other kinds."""
    layouts: tuple[tuple[str, ...], ...] = ()
    """A dataset's files as its loader declares them (`fedbench.core.data_files.DataFiles`); empty for other kinds."""
    files: str = ""
    """A dataset's files: where they are found now (`fedbench.core.data_files.files_status` of `layouts`), filled in
    when listed, never cached; empty for other kinds."""
    set_through: str = ""
    """Where a task sets this entry's options when it takes no parameters of its own: its kind's, filled in when
    the entry is made (cached or not), as it is a fact of the kind, not of the entry."""


@dataclass(frozen=True)
class Catalog:
    """Everything `list` shows: fedbench's own entries (cached) and the names installed packages declare."""

    own: dict[str, dict[str, Listed]]
    """Kind -> name -> entry, for fedbench's own entries that no entry point declares."""
    declared: dict[str, set[str]]
    """Kind -> the names entry points declare: read live, as their code is not in the digest."""
    presets: list[tuple[str, str]]
    """(name, summary) of every scenario preset, by name."""

    def entries(self, kind: str) -> list[Listed]:
        """Every entry of `kind`, by name."""
        names = sorted({*self.own[kind], *self.declared[kind]})
        return [self.own[kind].get(name) or _listed(kind, name) for name in names]

    def entry(self, kind: str, name: str) -> Listed:
        """Entry `name` of `kind`; an unknown name raises as the registry does, naming `list KIND`."""
        if name in self.own[kind]:
            return self.own[kind][name]
        KINDS[kind].registry.get(name, field=f"list {kind}")
        return _listed(kind, name)


def load() -> Catalog:
    """The catalog: fedbench's own entries from the cache file of the current sources and entry points, else
    built (importing every registered module) and written there."""
    installed = importlib.metadata.entry_points()
    declared = {kind: {ep.name for ep in installed.select(group=k.registry.group)} for kind, k in KINDS.items()}
    path = cache_dir() / "catalog" / f"{_digest(declared)}.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        raw = _build(declared)
        _write(path, raw)
    own = {
        kind: {
            name: Listed(
                name,
                text,
                tuple(Parameter(*p) for p in params),
                tuple(abilities),
                tuple(map(tuple, layouts)),
                set_through=KINDS[kind].set_through,
            )
            for name, text, params, abilities, layouts in rows
        }
        for kind, rows in raw["kinds"].items()
    }
    return Catalog(own, declared, [tuple(row) for row in raw["presets"]])


def summary(obj: Any) -> str:
    """The first paragraph of `obj`'s docstring, joined into one line (never cut mid-sentence)."""
    doc = inspect.getdoc(obj) or ""
    return " ".join(doc.split("\n\n")[0].split())


def parameters(kind: str, name: str) -> list[Parameter]:
    """The user parameters of registered `name` of `kind`: its Config's fields or its callable's keywords."""
    entry = KINDS[kind].registry.get(name, field=kind)
    if KINDS[kind].set_through:
        return []
    target = getattr(entry, "Config", entry)
    docs = field_docs(target) if isinstance(target, type) else args_docs(target)
    out = []
    for field, (annotation, default) in signature_fields(target, KINDS[kind].skip).items():
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
        for node, after in zip(body, body[1:], strict=False):
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


def _listed(kind: str, name: str) -> Listed:
    entry = KINDS[kind].registry.get(name, field=kind)
    abilities = ()
    if kind == "algorithms":
        from fedbench.algorithms.capabilities import capabilities_of

        abilities = tuple(capabilities_of(entry))
    files = getattr(entry, "data_files", None) if kind == "datasets" else None
    layouts = files.layouts if files is not None else ()
    return Listed(
        name, summary(entry), tuple(parameters(kind, name)), abilities, layouts, set_through=KINDS[kind].set_through
    )


def _build(declared: dict[str, set[str]]) -> dict[str, Any]:
    """fedbench's own entries and the presets as JSON-ready lists (a name an entry point declares is left out)."""
    from fedbench.scenarios.presets import PRESETS

    kinds = {
        kind: [
            [
                item.name,
                item.summary,
                [dataclasses.astuple(p) for p in item.parameters],
                list(item.capabilities),
                [list(layout) for layout in item.layouts],
            ]
            for item in (_listed(kind, name) for name in k.registry.names() if name not in declared[kind])
        ]
        for kind, k in KINDS.items()
    }
    return {"kinds": kinds, "presets": [[name, summary(fn)] for name, fn in sorted(PRESETS.items())]}


def _digest(declared: dict[str, set[str]]) -> str:
    """sha256 of the Python version, the names entry points declare, and every source file of the package."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256(f"{sys.version}\0{sorted((k, sorted(v)) for k, v in declared.items())}\0".encode())
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _write(path: Path, raw: dict[str, Any]) -> None:
    """Write atomically (another `list` may be reading) and drop the files of older sources; a cache folder
    that cannot be written only means the next `list` builds the listing again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(raw))
        os.replace(partial, path)
        for old in path.parent.glob("*.json"):
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        pass
