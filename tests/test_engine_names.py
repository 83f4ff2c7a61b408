"""What an engine decides lives in its folder and on its registry entry: no module outside
specaudit/engines/ and the registry compares a value with an engine's name (==, !=, in, match)."""

import ast
from pathlib import Path

import specaudit
from specaudit.config import RunConfig
from specaudit.contracts.engines import ENGINES

ROOT = Path(specaudit.__file__).parent
NAMES = frozenset(ENGINES)
EXEMPT = (ROOT / "engines", ROOT / "contracts" / "engines.py")


def _named(node: ast.AST) -> list[str]:
    """The engine names a comparison's operand spells: a string, or strings in a literal collection."""
    if isinstance(node, ast.Constant):
        return [node.value] if node.value in NAMES else []
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [name for element in node.elts for name in _named(element)]
    if isinstance(node, ast.Dict):
        return [name for key in node.keys if key is not None for name in _named(key)]
    return []


def engine_name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison of a value with an engine's name in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            found += [(node.lineno, name) for operand in (node.left, *node.comparators) for name in _named(operand)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, name) for name in _named(node.value)]
    return found


def test_the_check_finds_each_form_of_comparison():
    source = (
        "a = engine == 'llama-server'\n"
        "b = 'tree' in cfg.engines\n"
        "c = name not in ('openvino', 'x')\n"
        "d = cfg.engines != ['endpoint']\n"
        "match engine:\n"
        "    case 'staged':\n"
        "        pass\n"
        "e = engine == 'llama'\n"  # not an engine's name
        "f = run('tree')\n"  # a name passed on, not compared
    )
    assert engine_name_comparisons(source) == [(1, "llama-server"), (2, "tree"), (3, "openvino"), (4, "endpoint"), (6, "staged")]


def test_no_engine_name_is_compared_outside_the_engines_and_the_registry():
    found = [
        f"{path.relative_to(ROOT.parent)}:{line}: {name!r}"
        for path in sorted(ROOT.rglob("*.py"))
        if not any(path == exempt or exempt in path.parents for exempt in EXEMPT)
        for line, name in engine_name_comparisons(path.read_text(encoding="utf-8"))
    ]
    assert not found, "engine names compared outside specaudit/engines/ (declare it on the registry entry instead):\n" + "\n".join(found)


def test_every_registry_string_names_code_that_exists():
    """An entry is data; what it names must resolve, and a settings module must answer what the
    run config and the command line ask of it."""
    from specaudit.contracts.engines import resolve

    for name, spec in ENGINES.items():
        for target in (spec.executor, spec.scoring_pair, spec.run_decoder, *(add for _, add in spec.commands)):
            assert target is None or callable(resolve(target)), f"{name}: {target}"
        if spec.settings is not None:
            module = resolve(spec.settings)
            needed = ["validate_settings", *(["concurrency_levels", "with_concurrency"] if spec.concurrency else [])]
            assert all(callable(getattr(module, function, None)) for function in needed), f"{name}: {spec.settings}"
        assert not spec.concurrency or spec.settings is not None, name
        assert all(ENGINES[other].settings is not None for other in spec.reads_settings_of), f"{name}: {spec.reads_settings_of}"
        assert all(option not in RunConfig.model_fields for option, _ in spec.options), f"{name}: an option shadows a run config field"
