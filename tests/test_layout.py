"""The package's import graph has no loops (type-checking imports included), no strl_jax import
hides inside a function (the usual way to dodge a loop), every import points down the layer table,
the compiled core reaches neither the host loop nor the records, and modules, classes and
functions stay small enough to read: checked from the source, without importing anything."""

from __future__ import annotations

import ast
from pathlib import Path

import strl_jax

PACKAGE = Path(strl_jax.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def ancestors(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def imported_modules(node: ast.AST, known: set[str]) -> set[str]:
    """strl_jax modules an import statement loads (`from a import b` loads `a.b` when it is a module)."""
    names = set()
    if isinstance(node, ast.Import):
        names = {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
        names = {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return {n for n in names if n in known}


def import_graph() -> dict[str, set[str]]:
    """Each module's strl_jax imports anywhere in its file (`if TYPE_CHECKING:` blocks included),
    with the packages importing them runs first."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    graph = {}
    for name, path in files.items():
        deps = {m for node in ast.walk(ast.parse(path.read_text())) for m in imported_modules(node, known)}
        # importing `a.b.c` first runs the packages `a` and `a.b` (their __init__ may import more);
        # a module's own packages are already being initialised when it runs, so they add no edge
        own = ancestors(name)
        graph[name] = {m for d in deps for m in {d, *ancestors(d)} if m in known and m not in own} - {name}
    return graph


def test_no_import_loops_and_no_function_local_imports():
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    local = []
    for name, path in files.items():
        tree = ast.parse(path.read_text())
        for func in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                if imported_modules(node, known):
                    local.append(f"{name}.{func.name}")
    assert not local, f"strl_jax imports inside functions: {local}"
    graph = import_graph()
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                loop = stack[stack.index(dep) :] + [dep] if dep in stack else [node, dep]
                raise AssertionError("import loop: " + " -> ".join(loop))
            if dep not in state:
                visit(dep, [*stack, dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


# The package's layers, lowest first; the comment on each row says what it builds on.
LAYERS = (
    # the errors a user can act on
    ("errors",),
    # helpers that know nothing of policies or environments (and the reader of settings sections)
    ("collectives", "static_take", "user_functions", "xla_cpu", "onnx_graph", "config_sections"),
    # rollout storage and pure networks (flax modules, distributions, normalisers)
    ("buffers", "networks"),
    # computing only the rows a mask selects (over buffers' column selection); checkpoint files
    # of the networks' parameters (torch layouts convert through networks.conv2d)
    ("masked_rows", "checkpoints"),
    # batched environments (their resets run through masked_rows)
    ("envs",),
    # algorithms: losses and parts over networks, buffers and env observations (AMP frames)
    ("agents",),
    # typed configs, checked against the algorithm table, the envs and the networks
    ("configs",),
    # a finished run's policy, rebuilt from its stored config and checkpoint; the switch of mutex
    # policies between such policies
    ("inference", "mutex"),
    # what runs inside the compiled iteration (rollout, updates, evaluation episodes); mutex
    # policies switching finished runs; dataset writing sessions (their stop rules and metadata.json)
    ("train_loops", "mutex_from_runs", "dataset_sessions"),
    # what a run leaves behind: metrics rows, TensorBoard / W&B / Neptune writers, the code state
    ("records",),
    # the host loop: programs, devices, start and resume, populations, stages (a teacher is a
    # finished run's policy)
    ("runners",),
    # commands: python -m strl_jax.<name>
    ("train", "play", "collect", "export", "plot"),
    # built on other commands (dagger collects; the sim-to-sim episodes run an export)
    ("dagger", "native_episodes"),
    # the sim-to-sim command over its episodes; held commands in both simulators
    ("deploy", "command_tracking"),
)


def layer_unit(name: str) -> str | None:
    """The row member a module belongs to: its subpackage or top-level module (None: the package
    itself, which every module's import runs first anyway)."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None


def test_imports_point_down_the_layers():
    """A module imports only from its own subpackage (or module) and from earlier rows of `LAYERS`;
    the members of one row do not import each other. So each layer can be used, read and tested
    without the ones above it: the networks and buffers without configs or envs, a finished run's
    policy (inference, export, deploy) without the training loop, and training without the
    commands. A new subpackage or top-level module has to be placed in the table."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(files)
    rank = {unit: i for i, row in enumerate(LAYERS) for unit in row}
    units = {layer_unit(name) for name in files} - {None}
    assert units <= set(rank), f"place these in LAYERS: {sorted(units - set(rank))}"
    upward = []
    for name, path in sorted(files.items()):
        source = layer_unit(name)
        if source is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            for target in imported_modules(node, known):
                unit = layer_unit(target)
                if unit is not None and unit != source and rank[unit] >= rank[source]:
                    upward.append(f"{name} -> {target}")
    assert not upward, "imports that do not point down LAYERS: " + ", ".join(sorted(set(upward)))


# The compiled core (what runs inside the iteration) and the host-side packages it must not reach.
CORE = "strl_jax.train_loops"
HOST_SIDE = ("strl_jax.runners", "strl_jax.records")


def test_the_compiled_core_reaches_neither_the_host_loop_nor_the_records():
    """Nothing `train_loops` imports, directly or through other modules, is part of the host loop
    (`runners`) or of the records (`records`): the iteration can be read, traced and tested alone."""
    graph = import_graph()
    reached, todo = set(), [m for m in graph if m == CORE or m.startswith(CORE + ".")]
    while todo:
        module = todo.pop()
        for dep in graph[module] - reached:
            reached.add(dep)
            todo.append(dep)
    host = sorted(m for m in reached if m.startswith(HOST_SIDE))
    assert not host, f"the compiled core reaches {host}"


MAX_MODULE_LINES, MAX_CLASS_LINES, MAX_FUNCTION_LINES = 600, 300, 60


def test_modules_classes_and_functions_are_small():
    """No module over 600 lines, no class over 300 and no function over 60 (signature, docstring
    and body: what a reader has to hold at once)."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(PACKAGE).as_posix()
        lines = len(source.splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                span = node.end_lineno - node.lineno + 1
                if span > limit:
                    too_long.append(f"{where}:{node.name}: {span} lines")
    assert not too_long, "over the size limits: " + ", ".join(too_long)
