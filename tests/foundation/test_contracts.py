"""Every package and module directly under memoryapp/ and governance/ stands in an import contract.

The layers and forbidden contracts of import-linter (pyproject.toml, checked by `lint-imports` in
`make test`) only hold for the modules they name: a package they leave out may import anything. So
a new package must be placed in a layer (or a forbidden contract) before it lands.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.kit import PROJECT_ROOT

# Django's migrations are loaded by the migration framework, never imported by the project's code.
NOT_CONTRACTED = {"memoryapp.migrations", "governance.migrations"}


def _children(package: str, root: Path = PROJECT_ROOT) -> set[str]:
    """The packages and modules directly under `package` (dotted names)."""
    found: set[str] = set()
    for path in (root / package.replace(".", "/")).iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            found.add(f"{package}.{path.name}")
        elif path.suffix == ".py" and path.name != "__init__.py":
            found.add(f"{package}.{path.stem}")
    return found


def _named(pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> set[str]:
    """The modules a layers or forbidden contract names (the acyclic contract names only ancestors)."""
    named: set[str] = set()
    for contract in tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]:
        for layer in contract.get("layers", []):
            named.update(name.strip() for name in layer.replace("|", ":").split(":"))
        named.update(contract.get("source_modules", []))
        named.update(contract.get("forbidden_modules", []))
    return named


def _uncontracted(root: Path = PROJECT_ROOT, pyproject: Path = PROJECT_ROOT / "pyproject.toml") -> list[str]:
    children = _children("memoryapp", root) | _children("governance", root)
    return sorted(children - _named(pyproject) - NOT_CONTRACTED)


def test_every_package_of_memoryapp_and_governance_is_named_in_an_import_contract() -> None:
    assert _uncontracted() == []


def test_a_package_left_out_of_every_contract_is_reported(tmp_path: Path) -> None:
    for package in ("memoryapp", "governance"):
        (tmp_path / package / "listed").mkdir(parents=True)
        (tmp_path / package / "listed" / "__init__.py").write_text("")
    (tmp_path / "memoryapp" / "newcomer").mkdir()
    (tmp_path / "memoryapp" / "newcomer" / "__init__.py").write_text("")
    (tmp_path / "governance" / "loose.py").write_text("")
    (tmp_path / "governance" / "notes").mkdir()  # no __init__.py: not a package
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[tool.importlinter]\nroot_packages = ['memoryapp', 'governance']\n"
        "[[tool.importlinter.contracts]]\nname = 'l'\ntype = 'layers'\n"
        "layers = ['memoryapp.listed | governance.listed']\n"
    )
    assert _uncontracted(tmp_path, pyproject) == ["governance.loose", "memoryapp.newcomer"]
