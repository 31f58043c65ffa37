"""What a source file imports, read from its syntax tree (for the layering tests)."""

from __future__ import annotations

import ast
from pathlib import Path

__all__ = ["imported_modules"]


def imported_modules(path: Path) -> set[str]:
    """Absolute module names ``path`` imports (``import a.b``, ``from a.b import c``);
    relative imports stay inside their package and are left out."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names
