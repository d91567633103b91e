"""The code's shape: the layering rule (data <- encoders <- evaluation <- {augment, probes, train} <- experiments
<- cli, shared helpers below all; every import counts, those inside functions too) and functions no longer than a
screen."""

import ast
from pathlib import Path

import cselab

PACKAGE = Path(cselab.__file__).parent
LAYERS = {"core": 0, "data": 1, "encoders": 2, "evaluation": 3, "augment": 4, "probes": 4, "train": 4,
          "experiments": 5, "cli": 6}


def layer_of(module: str) -> str:
    """``cselab.train.run.trainer`` -> train; top-level modules (errors, registry, metrics ...) are core."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] if node.module != "cselab" else [f"cselab.{a.name}" for a in node.names]
            found += [(node.lineno, name) for name in names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name == "cselab" or name.startswith("cselab.")]


def violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        module = "cselab." + ".".join(path.relative_to(package).with_suffix("").parts)
        mine = layer_of(module)
        for line, name in imports(path):
            theirs = layer_of(name)  # a bare `import cselab` is the package's __init__: core
            if theirs == mine:
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                found.append(f"{path.relative_to(package.parent)}:{line}: {mine} imports {name} ({theirs})")
    return found


def test_no_module_imports_from_its_own_layer_or_above():
    assert violations() == []


def test_the_check_sees_a_violation(tmp_path):
    fake = tmp_path / "cselab"
    (fake / "augment").mkdir(parents=True)
    (fake / "augment" / "x.py").write_text("def f():\n    from cselab.probes.results import checksums\n")
    assert violations(fake) == ["cselab/augment/x.py:2: augment imports cselab.probes.results (probes)"]
    (fake / "augment" / "x.py").write_text("import cselab\nfrom cselab import errors, probes\n")
    assert violations(fake) == ["cselab/augment/x.py:2: augment imports cselab.probes (probes)"]


def long_functions(package: Path = PACKAGE, limit: int = 80) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.name} has {length} lines")
    return found


def test_no_function_is_longer_than_80_lines(tmp_path):
    assert long_functions() == []
    (tmp_path / "cselab").mkdir()
    (tmp_path / "cselab" / "long.py").write_text("def f():\n" + "    x = 1\n" * 80)
    assert long_functions(tmp_path / "cselab") == ["cselab/long.py:1: f has 81 lines"]
