"""plugins.py is THE list of plug-ins, and the registries it fills are whole and honest.

Every module listed exists and registers something (a fault, a check, a platform, a
platform variant or a ledger undo); every module of the source that registers something at import is listed (a
plug-in left out would be missing from every drill and from ``faultdrill cleanup``); the
plan's fault union (``plan.faults.FAULT_SPECS``) and the fault registry name the same kinds,
each fault's ``spec_model`` being the spec of its kind; the registries refuse a name twice.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from faultdrill import ledger, plugins
from faultdrill.checks import api as checks_api
from faultdrill.errors import DrillError
from faultdrill.faults import api as faults_api
from faultdrill.plan.faults import FAULT_KINDS, FAULT_SPECS
from faultdrill.platforms import api as platforms_api

SRC = Path(__file__).resolve().parent.parent / "src"
LISTED = (*plugins.FAULT_MODULES, *plugins.CHECK_MODULES, *plugins.PLATFORM_MODULES)


def _variants() -> dict[str, type[Any]]:
    """A platform's variants (``isolation: netns``, ``ray.address``, the embedded Slurm and
    the Kubernetes test cluster) register in their platform's table, by name."""
    from faultdrill.platforms.kubernetes import platform as kubernetes
    from faultdrill.platforms.local import platform as local
    from faultdrill.platforms.ray import platform as ray
    from faultdrill.platforms.slurm import platform as slurm

    tables = {
        "local": local.ISOLATION_VARIANTS,
        "slurm": slurm.VARIANTS,
        "ray": ray.VARIANTS,
        "kubernetes": kubernetes.VARIANTS,
    }
    return {f"{p} {name}": cls for p, table in tables.items() for name, cls in table.items()}


def _registrants() -> dict[str, set[str]]:
    """module -> what it registered, once every plug-in is loaded."""
    plugins.load()
    found: dict[str, set[str]] = {}
    entries: list[tuple[str, Any]] = [
        *((f"fault {k}", v) for k, v in faults_api.FAULTS.items()),
        *((f"check {k}", v.fn) for k, v in checks_api.CHECKS.items()),
        *((f"platform {k}", v) for k, v in platforms_api.PLATFORMS.items()),
        *((f"undo {k}", v) for k, v in ledger.UNDOERS.items()),
        *((f"variant {k}", v) for k, v in _variants().items()),
    ]
    for what, obj in entries:
        found.setdefault(obj.__module__, set()).add(what)
    return found


def test_the_lists_name_each_module_once() -> None:
    assert len(LISTED) == len(set(LISTED))
    assert all(name.startswith("faultdrill.") for name in LISTED)


def test_every_listed_module_exists_and_registers_something() -> None:
    for name in LISTED:
        path = SRC / (name.replace(".", "/") + ".py")
        assert path.is_file(), f"plugins.py names {name}, but {path} does not exist"
    registrants = _registrants()
    silent = [name for name in LISTED if not registrants.get(name)]
    assert not silent, f"listed in plugins.py but register nothing: {silent}"


def test_every_module_that_registers_is_listed() -> None:
    registrants = _registrants()
    unlisted = sorted(m for m in registrants if m.startswith("faultdrill.") and m not in LISTED)
    assert not unlisted, f"register plug-ins but plugins.py does not name them: {unlisted}"


def _registers_at_import(path: Path) -> bool:
    """Whether a module-level definition is decorated with a registry's decorator."""
    names = {"register", "check", "undoer", "register_platform"}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                name = (
                    target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
                )
                if name in names:
                    return True
    return False


def test_every_module_with_a_registering_decorator_is_listed() -> None:
    """Read from the source, so a module that only a drill's import chain reaches (and so
    registered nothing in this process) is found too."""
    decorated = {
        ".".join(path.relative_to(SRC).with_suffix("").parts)
        for path in (SRC / "faultdrill").rglob("*.py")
        if path.name != "api.py" and _registers_at_import(path)
    }
    assert decorated  # the walk found the plug-ins
    assert not sorted(decorated - set(LISTED))


def test_the_plan_union_and_the_fault_registry_name_the_same_kinds() -> None:
    plugins.load()
    assert sorted(FAULT_KINDS) == sorted(faults_api.FAULTS)
    assert len(FAULT_KINDS) == len(set(FAULT_KINDS))
    by_kind = {spec.model_fields["kind"].default: spec for spec in FAULT_SPECS}
    for kind, fault in faults_api.FAULTS.items():
        assert fault.kind == kind
        assert fault.spec_model is by_kind[kind], f"{kind}: spec_model is not FAULT_SPECS' spec"


def test_the_registries_refuse_a_name_twice() -> None:
    plugins.load()
    kind, fault = next(iter(faults_api.FAULTS.items()))

    class Again(fault):  # type: ignore[valid-type,misc]
        pass

    with pytest.raises(DrillError, match="registered twice"):
        faults_api.register(Again)
    assert faults_api.FAULTS[kind] is fault

    name = next(iter(checks_api.CHECKS))
    before = checks_api.CHECKS[name]
    with pytest.raises(DrillError, match="registered twice"):
        checks_api.check(name, before.category)(lambda ctx: [])
    assert checks_api.CHECKS[name] is before

    platform = next(iter(platforms_api.PLATFORMS.values()))
    with pytest.raises(DrillError, match="registered twice"):
        platforms_api.register(type("Again", (platform,), {}))
    assert platforms_api.PLATFORMS[platform.name] is platform

    undo_kind = next(iter(ledger.UNDOERS))
    undo = ledger.UNDOERS[undo_kind]
    with pytest.raises(DrillError, match="registered twice"):
        ledger.undoer(undo_kind, owns={})(lambda data: None)
    assert ledger.UNDOERS[undo_kind] is undo
