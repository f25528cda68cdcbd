"""The house stays readable: no function over 80 lines and no class over 300 in the package.

A long function is where two jobs hide (the live session's class once held both passes and
four copies of the session's words); the limit makes the next one visible in review instead
of in a bug. The check reads the source with `ast`: nothing is imported or run.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "whisper_demo"
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300


def oversized_definitions(root: Path):
    """(path:line, kind, name, lines) for every function or class past its limit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                kind, limit = "function", MAX_FUNCTION_LINES
            elif isinstance(node, ast.ClassDef):
                kind, limit = "class", MAX_CLASS_LINES
            else:
                continue
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append((f"{path.relative_to(root.parent)}:{node.lineno}", kind, node.name, lines))
    return found


def test_the_checker_sees_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    found = oversized_definitions(tmp_path)
    assert [(kind, name) for _, kind, name, _ in found] == [("function", "long")]


def test_no_function_over_80_lines_and_no_class_over_300():
    assert oversized_definitions(PACKAGE) == []
