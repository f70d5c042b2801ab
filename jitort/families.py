"""Op families: packages (``jitort/shapes/``, ``jitort/codegen/lowerings/``) whose modules each
register one family's ops when imported, discovered rather than listed."""
from __future__ import annotations

import importlib
import pkgutil


def import_families(package: str, path, helpers=frozenset()) -> tuple[str, ...]:
    """Import every module of ``package`` (found at ``path``) except ``helpers``, in name
    order, so that a new family module registers without any list edited; returns the names."""
    names = tuple(sorted(m.name for m in pkgutil.iter_modules(path)
                         if m.name not in helpers and not m.name.startswith("_")))
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names
