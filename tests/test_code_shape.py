"""The code's shape: the layering rule (data <- encoders <- evaluation <- {augment, probes} <- train <- {experiments,
integrations} <- cli, shared helpers below all: training selects checkpoints with a probe suite; every import counts,
those inside functions too), and inside train/ (step primitives <- plug-ins <- config <- {batches, model} <-
{objective, protocols, sharding} <- {step, out} <- run <- recipe), no modules that import each other and functions no
longer than 60 lines."""

import ast
from pathlib import Path

import pytest

import cselab

PACKAGE = Path(cselab.__file__).parent
LAYERS = {"core": 0, "data": 1, "encoders": 2, "evaluation": 3, "augment": 4, "probes": 4, "train": 5,
          "experiments": 6, "integrations": 6, "cli": 7}


def layer_of(module: str) -> str:
    """``cselab.train.run.setup`` -> train; top-level modules (errors, registry, metrics ...) are core."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "core"


def imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            package = node.module in ("cselab", "cselab.train")  # `from cselab.train import plugins`: the module
            names = [f"{node.module}.{a.name}" for a in node.names] if package else [node.module]
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


#: Inside train/, by the part of the module's name after ``cselab.train``: the step primitives (gathering across
#: processes, a model's LM heads, the token ids kept per corpus), the plug-ins, the config that validates against
#: them, then batches and the training encoder, the objective, the ledger and sharding, the training step and what OUT
#: guarantees, the run's parts, the recipe; a new part must be placed here.
TRAIN_LAYERS = {"distributed": 0, "language_models": 0, "token_ids": 0, "plugins": 1, "config": 2, "batches": 3,
                "model": 3, "objective": 4, "protocols": 4, "sharding": 4, "step": 5, "out": 5, "run": 6, "recipe": 7,
                "__init__": 8}


def train_layer_of(module: str) -> str:
    """``cselab.train.run.setup`` -> run; ``cselab.train`` -> __init__."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def train_violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted((package / "train").rglob("*.py")):
        mine = train_layer_of("cselab." + ".".join(path.relative_to(package).with_suffix("").parts))
        where = path.relative_to(package.parent)
        if mine not in TRAIN_LAYERS:
            found.append(f"{where}: train.{mine} has no place in TRAIN_LAYERS")
            continue
        for line, name in imports(path):
            theirs = train_layer_of(name)
            above = TRAIN_LAYERS.get(theirs, len(TRAIN_LAYERS)) >= TRAIN_LAYERS[mine]  # an unplaced part: above all
            if name.startswith("cselab.train") and theirs != mine and above:
                found.append(f"{where}:{line}: train.{mine} imports {name} (train.{theirs})")
    return found


def test_no_module_of_train_imports_from_its_own_layer_or_above():
    assert train_violations() == []


def test_the_train_check_sees_a_violation_and_an_unplaced_part(tmp_path):
    fake = tmp_path / "cselab" / "train"
    (fake / "plugins").mkdir(parents=True)
    (fake / "plugins" / "x.py").write_text("def f():\n    from cselab.train import objective\n")
    assert train_violations(fake.parent) == [
        "cselab/train/plugins/x.py:2: train.plugins imports cselab.train.objective (train.objective)"]
    (fake / "plugins" / "x.py").write_text("")
    (fake / "steps.py").write_text("")
    assert train_violations(fake.parent) == ["cselab/train/steps.py: train.steps has no place in TRAIN_LAYERS"]


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ``package`` it imports (``from cselab.a import b`` is the module
    ``cselab.a.b`` where there is one); a package is its ``__init__``."""
    paths = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        parts = parts[:-1] if parts[-1] == "__init__" else parts
        paths[".".join(("cselab", *parts))] = path
    graph = {}
    for module, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths else node.module
                          for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        graph[module] = {name for name in found if name in paths and name != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or round a circle (strongly connected components of
    more than one module, Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def test_no_modules_import_each_other():
    assert import_circles(import_graph()) == []


def test_the_check_sees_an_import_circle(tmp_path):
    fake = tmp_path / "cselab"
    (fake / "train").mkdir(parents=True)
    (fake / "train" / "__init__.py").write_text("")
    (fake / "train" / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from cselab.train.b import B\n")
    (fake / "train" / "b.py").write_text("def f():\n    from cselab.train import a\n")
    (fake / "train" / "c.py").write_text("import cselab.train.a\n")
    assert import_circles(import_graph(fake)) == [["cselab.train.a", "cselab.train.b"]]


def long_functions(package: Path = PACKAGE, limit: int = 60) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > limit:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.name} has {length} lines")
    return found


def test_no_function_is_longer_than_60_lines(tmp_path):
    assert long_functions() == []
    (tmp_path / "cselab").mkdir()
    (tmp_path / "cselab" / "long.py").write_text("def f():\n" + "    x = 1\n" * 60)
    assert long_functions(tmp_path / "cselab") == ["cselab/long.py:1: f has 61 lines"]


def long_files(folder: Path, limit: int = 400) -> list[str]:
    """The Python files of ``folder`` longer than ``limit`` lines."""
    return [f"{path.name}: {count} lines" for path in sorted(folder.glob("*.py"))
            if (count := len(path.read_text(encoding="utf-8").splitlines())) > limit]


def test_no_benchmark_script_is_longer_than_400_lines(tmp_path):
    """A benchmark is read top to bottom: a script with many sections keeps them in modules of their own
    (gpu_check.py's gpu_*.py)."""
    assert long_files(PACKAGE.parent / "benchmarks") == []
    (tmp_path / "long.py").write_text("x = 1\n" * 401)
    assert long_files(tmp_path) == ["long.py: 401 lines"]


#: String methods and ``re`` functions that read text, and the marks of Markdown (a table's border, a paragraph's
#: blank line, a heading, an image, bold, a code fence): a call of one with a string holding one of these reads
#: Markdown, unless it is listed in MARKDOWN_READS_ALLOWED with what it reads instead.
TEXT_READERS = {"split", "rsplit", "startswith", "endswith", "partition", "rpartition", "strip", "lstrip", "rstrip"}
RE_READERS = {"match", "search", "fullmatch", "findall", "finditer", "split", "sub", "subn", "compile"}
MARKDOWN_MARKS = ("|", "\n\n", "#", "![", "**", "```")
MARKDOWN_READS_ALLOWED = {
    "cselab/augment/backtranslate.py": "apertium's marks of unknown words (# and @) in its output",
    "cselab/augment/negation.py": "wiki markup in corpus sentences, which negation leaves alone",
    "cselab/augment/wordnet.py": "WordNet's data files, whose fields are separated by ' | '",
    "cselab/registry.py": "a plug-in's docstring, whose first paragraph is its summary",
    "cselab/train/protocols.py": "the module's own docstring, whose first paragraph the ledger page quotes",
}


def markdown_reads(package: Path = PACKAGE) -> list[str]:
    """Each call in ``package`` that reads text by a Markdown mark (see :data:`TEXT_READERS`), outside the files of
    :data:`MARKDOWN_READS_ALLOWED`: results flow one way, results -> blocks -> Markdown/HTML."""
    found: list[tuple[str, int, str]] = []
    for path in sorted(package.rglob("*.py")):
        where = path.relative_to(package.parent).as_posix()
        if where in MARKDOWN_READS_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            by_re = isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
            if node.func.attr not in (RE_READERS if by_re else TEXT_READERS):
                continue
            patterns = [*node.args[:1], *(k.value for k in node.keywords if k.arg in ("sep", "pattern", "prefix",
                                                                                     "suffix", "chars"))]
            marks = [c.value for pattern in patterns for c in ast.walk(pattern) if isinstance(c, ast.Constant)
                     and isinstance(c.value, str) and any(mark in c.value for mark in MARKDOWN_MARKS)]
            if marks:
                found.append((where, node.lineno, ast.unparse(node)[:70]))
    return [f"{where}:{line}: {code}" for where, line, code in sorted(found)]


def test_nothing_in_cselab_reads_markdown():
    assert markdown_reads() == []
    for where in MARKDOWN_READS_ALLOWED:  # each exception still exists
        assert (PACKAGE.parent / where).is_file(), where


def test_the_markdown_check_sees_the_old_reports_parsing(tmp_path):
    fake = tmp_path / "cselab" / "probes"
    fake.mkdir(parents=True)
    (fake / "report.py").write_text(
        "import re\n\n\ndef html(markdown):\n    for block in markdown.split('\\n\\n'):\n"
        "        if block.startswith('|'):\n            rows = [line.split(' | ') for line in block.splitlines()]\n"
        "        heading = re.match(r'^(#{1,3}) (.*)$', block)\n"
        "        cells = block.split(sep=' | ')\n")
    assert [line.split(": ", 1)[0] for line in markdown_reads(fake.parent)] == [
        "cselab/probes/report.py:5", "cselab/probes/report.py:6", "cselab/probes/report.py:7",
        "cselab/probes/report.py:8", "cselab/probes/report.py:9"]


STRICT = ("cselab.registry", "cselab.train.config.*", "cselab.encoders.*")
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_incomplete_defs", "check_untyped_defs", "disallow_any_generics",
                "warn_return_any", "strict_equality")


def type_check_gaps(config: dict) -> list[str]:
    """What the ``[tool.mypy]`` section of a pyproject leaves unchecked: a module exempt (``ignore_errors``), a
    strict module without one of the strict flags."""
    gaps = [f"{override.get('module')}: ignore_errors" for override in config.get("overrides", [])
            if override.get("ignore_errors")]
    if config.get("ignore_errors"):
        gaps.append("every module: ignore_errors")
    for module in STRICT:
        flags = {flag for override in config.get("overrides", []) if module in override.get("module", [])
                 for flag in STRICT_FLAGS if override.get(flag)}
        gaps += [f"{module}: {flag} not set" for flag in STRICT_FLAGS if flag not in flags]
    return gaps


def test_mypy_checks_every_module_and_the_core_strictly():
    """`make lint` runs mypy with pyproject's config: no module exempt, the registry, the method config and the
    encoders under --strict's flags."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib comes with Python 3.11")
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert config["files"] == ["cselab"] and type_check_gaps(config) == []


def test_the_type_check_gaps_are_seen():
    strict = {"module": list(STRICT), **dict.fromkeys(STRICT_FLAGS, True)}
    assert type_check_gaps({"overrides": [strict]}) == []
    exempt = {"module": ["cselab.probes.bias"], "ignore_errors": True}
    assert type_check_gaps({"overrides": [strict, exempt]}) == ["['cselab.probes.bias']: ignore_errors"]
    lax = {**strict, "module": ["cselab.registry", "cselab.train.config.*"]}
    assert type_check_gaps({"overrides": [lax]}) == [f"cselab.encoders.*: {flag} not set" for flag in STRICT_FLAGS]
