"""The project's Python files a script runs: the script and every project module it imports, transitively.

The analysis rules list them as inputs, so that editing a module they import (charts.py,
stats.py, ...) remakes their outputs. Snakemake's own code trigger watches only a rule's
`script:` file, and profiles/default turns it off so that run jobs never re-measure after a
change of the runner's code; run rules therefore never list these files.

Imports are read from the source (ast), wherever they are (also inside functions), and
resolved against the scripts folder only: the standard library and installed packages are
not the project's code. An import of a module the folder does not have is skipped.
"""

from __future__ import annotations

import ast
import functools
import os
from pathlib import Path


def library_first_for_jobs(library_dir: str, environ=os.environ) -> str:
    """PYTHONPATH with library_dir first (once), set in environ for every job the workflow starts.

    The workflow's own library (its scripts folder), whatever the environment's install of it points at."""
    rest = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != library_dir]
    environ["PYTHONPATH"] = os.pathsep.join([library_dir, *rest])
    return environ["PYTHONPATH"]


def _module_file(root: Path, name: str) -> Path | None:
    """root/a/b.py or root/a/b/__init__.py for the dotted name a.b, or None."""
    if not name:
        return None
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(root: Path, path: Path) -> list[str]:
    """The dotted package path of a file under root, as parts (a module's own package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        return parts[:-1]
    return parts[:-1]


def _imported_names(root: Path, path: Path, tree: ast.AST) -> list[str]:
    """Dotted names of every module an import statement in tree may load (and its parent packages)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = _package_of(root, path)
                if node.level > 1:
                    package = package[: len(package) - (node.level - 1)]
                module = ".".join(package + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.append(module)
            # `from package import module` loads a module; `from module import name` loads nothing more.
            names += [f"{module}.{alias.name}" if module else alias.name for alias in node.names]
    with_parents: list[str] = []
    for name in names:
        parts = name.split(".")
        with_parents += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return with_parents


def project_code(script: str | Path, root: str | Path) -> list[Path]:
    """script and the files under root it imports, directly or through one another, sorted; script first."""
    root = Path(root).resolve()
    script = Path(script).resolve()
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        stat = path.stat()
        for name in _imports_of(root, path, stat.st_mtime_ns, stat.st_size):
            found = _module_file(root, name)
            if found is not None and found not in seen:
                todo.append(found)
    return [script] + sorted(seen - {script})


@functools.lru_cache(maxsize=None)
def _imports_of(root: Path, path: Path, mtime_ns: int, size: int) -> tuple[str, ...]:
    """_imported_names of one version of a file (its time and size name the version), parsed once: the Snakefile
    asks for the code of every analysis rule, and their scripts import mostly the same modules."""
    return tuple(_imported_names(root, path, ast.parse(path.read_text(), str(path))))
