"""No port is picked by bind-and-release anywhere in the project: a ``with socket.socket()``
block that binds and reads back its port must use the number while it holds the socket (a
``yield`` inside the block, tests/helpers.refused_port, or a server that listens and serves
inside it), never hand it on by ``return`` or after the block (another process may take a
released port before whoever was handed it binds: EADDRINUSE)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["numabench", "fixtures", "tests", "benchmarks", "conftest.py", ".ci"]


def python_files() -> list[Path]:
    out = []
    for name in SOURCES:
        p = ROOT / name
        out += [p] if p.is_file() else sorted(f for f in p.rglob("*.py") if ".venv" not in f.parts)
    return out


def _is_socket_call(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "socket"
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "socket")


def _port_names(body: list[ast.stmt]) -> set[str]:
    """Names assigned from an expression that reads the bound address back."""
    names = set()
    for n in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(n, ast.Assign) and any(isinstance(m, ast.Attribute) and m.attr == "getsockname"
                                             for m in ast.walk(n.value)):
            names |= {t.id for target in n.targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return names


def released_ports(source: str) -> list[int]:
    """Line numbers of ``with socket.socket()`` blocks that read their bound port back and hand
    it on past the block: returned from inside it, or never used inside it after being read."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(_is_socket_call(i.context_expr) for i in node.items):
            inner = [n for stmt in node.body for n in ast.walk(stmt)]
            if not any(isinstance(n, ast.Attribute) and n.attr == "getsockname" for n in inner):
                continue
            if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in inner):
                continue  # handed on while held
            returns = any(isinstance(n, ast.Return) and n.value is not None for n in inner)
            names = _port_names(node.body)
            used_inside = any(isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in names for n in inner)
            if returns or not used_inside:
                lines.append(node.lineno)
    return lines


def test_the_checker_finds_bind_and_release():
    old = ("import socket\ndef free_port():\n    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n"
           "        return s.getsockname()[1]\n")
    held = ("import socket\ndef held():\n    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n"
            "        yield s.getsockname()[1]\n")
    after = ("import socket\ndef f():\n    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n"
             "        port = s.getsockname()[1]\n    serve(port)\n")
    served = ("import socket\ndef f():\n    with socket.socket() as s:\n        s.bind(('127.0.0.1', 0))\n"
              "        s.listen(1)\n        port = s.getsockname()[1]\n        connect(port)\n")
    assert released_ports(old) == [3] and released_ports(after) == [3]
    assert released_ports(held) == [] and released_ports(served) == []


def test_no_port_is_picked_by_bind_and_release():
    found = {str(p.relative_to(ROOT)): lines for p in python_files() if (lines := released_ports(p.read_text()))}
    assert not found, f"ports picked by bind-and-release (file: lines): {found}"
