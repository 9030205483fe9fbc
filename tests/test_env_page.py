"""docs/ENV.md lists every environment variable the product and the .ci/ scripts read, once, and
nothing else: the sources are scanned (Python by its syntax tree, bash and the workflow by a
small quote-aware scan, C++ by getenv) and compared with the page's tables. A name the code
reads that the page lacks, a name on the page that nothing reads, a name listed twice, and a
row whose "read by" cell names a file that does not read it fail, naming them. No torch, no
subprocess: well under a second."""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "ENV.md"

# The product: the package, the pytest glue, the benchmarks and the kernels' sources.
PRODUCT_PY = ("numabench", "fixtures", "benchmarks", "conftest.py")
PRODUCT_C = ("csrc",)
CI = ROOT / ".ci"

NAME = re.compile(r"[A-Z][A-Z0-9_]*[A-Z0-9]")
# Variables every program honours (the page says so and does not list them), the shell's own,
# and what a GitHub Actions runner sets for its steps' plumbing.
GENERIC = {"PATH", "HOME", "PWD", "TMPDIR", "USER", "SHELL", "LANG", "TERM", "PYTHONPATH",
           "SECONDS", "PIPESTATUS", "BASH_SOURCE", "BASH_REMATCH", "RANDOM", "LINENO", "FUNCNAME",
           "IFS", "OPTARG", "OPTIND", "REPLY", "UID", "EUID", "PPID", "HOSTNAME",
           "GITHUB_ENV", "GITHUB_OUTPUT", "GITHUB_PATH"}


# -- Python ---------------------------------------------------------------------------------

def _py_files(*roots: str) -> list[Path]:
    """The Python files under roots that can read a variable (the others are not parsed)."""
    out: list[Path] = []
    for r in roots:
        p = ROOT / r
        out += [p] if p.is_file() else sorted(p.rglob("*.py"))
    return [f for f in out if _MAY_READ.search(f.read_text())]


_MAY_READ = re.compile(r"environ|getenv|_ENV\b|\bKnob\(")


def _env_constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Module constants NAME_ENV = "VARIABLE" (a variable's name kept in one place)."""
    out = {}
    for tree in trees.values():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and NAME.fullmatch(node.value.value)):
                for t in node.targets:
                    if isinstance(t, ast.Name) and t.id.endswith("_ENV"):
                        out[t.id] = node.value.value
    return out


def _is_environ(node: ast.AST) -> bool:
    text = ast.unparse(node)
    return "environ" in text or text == "env"


def python_reads(files: list[Path], consts: dict[str, str] | None = None) -> dict[str, set[str]]:
    """name -> files: os.environ.get / os.environ[...] / os.getenv / `in os.environ` of a literal
    or of a NAME_ENV constant (also env.get(...) where env stands for os.environ), every NAME_ENV
    constant, and a knob's retired variable (Knob(..., retired_env): read so as to refuse it)."""
    trees = {f: ast.parse(f.read_text(), str(f)) for f in files}
    consts = {**(consts or {}), **_env_constants(trees)}
    found: dict[str, set[str]] = {}

    def add(node: ast.AST | None, f: Path) -> None:
        name = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        elif isinstance(node, ast.Name):
            name = consts.get(node.id)
        elif isinstance(node, ast.Attribute):
            name = consts.get(node.attr)
        if name and NAME.fullmatch(name):
            found.setdefault(name, set()).add(str(f.relative_to(ROOT)))

    for f, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Attribute) and fn.attr == "get" and node.args and _is_environ(fn.value):
                    add(node.args[0], f)
                elif isinstance(fn, ast.Attribute) and fn.attr == "getenv" and node.args:
                    add(node.args[0], f)
                elif isinstance(fn, ast.Name) and fn.id == "Knob":
                    retired = [k.value for k in node.keywords if k.arg == "retired_env"]
                    add(retired[0] if retired else (node.args[3] if len(node.args) > 3 else None), f)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
                add(node.slice, f)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn)) \
                    and _is_environ(node.comparators[0]):
                add(node.left, f)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_ENV")
                                                      for t in node.targets):
                add(node.value, f)
    return found


# -- bash -----------------------------------------------------------------------------------

_HEREDOC_QUOTED = re.compile(r"<<-?\s*(['\"])(\w+)\1")


def shell_text(text: str) -> tuple[str, str]:
    """A bash script as (code, expanded): comments, single-quoted strings, escaped characters and
    the bodies of quoted heredocs (<<'EOF': Python, awk) blanked out of both; double-quoted
    strings kept in expanded (the shell expands them) and blanked out of code."""
    code: list[str] = []
    expanded: list[str] = []
    lines = text.splitlines()
    i, state = 0, "plain"  # plain, single, double
    while i < len(lines):
        line = lines[i]
        c_line: list[str] = []
        e_line: list[str] = []
        j = 0
        while j < len(line):
            c = line[j]
            if state == "single":
                state = "plain" if c == "'" else state
            elif c == "\\":
                j += 1  # the next character is literal
            elif state == "double":
                if c == '"':
                    state = "plain"
                    c_line.append(c)
                e_line.append(c)
            elif c == "'":
                state = "single"
            elif c == "#" and (j == 0 or line[j - 1] in " \t;(&|"):
                break  # a comment
            else:
                if c == '"':
                    state = "double"
                c_line.append(c)
                e_line.append(c)
            j += 1
        code.append("".join(c_line))
        expanded.append("".join(e_line))
        m = _HEREDOC_QUOTED.search(line)
        if m:  # its body is not the shell's (also where the line opens it inside "$(...)")
            i += 1
            while i < len(lines) and lines[i].strip() != m.group(2):
                i += 1
        i += 1
    return "\n".join(code), "\n".join(expanded)


_EXPAND = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-=?+])?|\$([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGN = re.compile(r"(?:^|[\s;&|({`])(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\])?\+?=")
_BOUND = re.compile(r"\b(?:for|local|read(?:\s+-\w+)*)\s+((?:[A-Za-z_][A-Za-z0-9_]*\s*)+)")
_EXPORT = re.compile(r"\bexport\s+((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s*)+)")


def bash_names(text: str) -> tuple[set[str], set[str]]:
    """(read, set): the upper-case variables a bash script reads, where it expands them with a
    default (${X:-...}, ${X-...}, ${X:=...}, ${X:+...}, ...) or expands them and never assigns
    them; and those it sets (NAME=..., export NAME=..., NAME=... command, also an `export
    NAME=...` in a string another shell runs)."""
    code, expanded = shell_text(text)
    assigned = {m.group(1) for m in _ASSIGN.finditer(code)}
    for m in _BOUND.finditer(code):
        assigned.update(m.group(1).split())
    exported = {a.split("=")[0] for m in _EXPORT.finditer(expanded) for a in m.group(1).split()}
    read = set()
    for m in _EXPAND.finditer(expanded):
        name = m.group(1) or m.group(3)
        if NAME.fullmatch(name) and (m.group(2) or name not in assigned):
            read.add(name)
    return read - GENERIC, {n for n in assigned | exported if NAME.fullmatch(n)} - GENERIC


def ci_scripts() -> list[Path]:
    """The shell scripts of .ci/ (by their #! line)."""
    return sorted(p for p in CI.rglob("*") if p.is_file()
                  and re.match(r"#!.*\b(?:ba)?sh\b", p.read_text(errors="replace")))


# Python inside a script (python3 - <<'EOF' ... EOF, python -c '...'): its literal reads.
_PY_IN_SHELL = re.compile(r"(?:environ\.get\(|getenv\(|environ\[)\s*[\"']([A-Z][A-Z0-9_]*)[\"']")


_WORKFLOW_EXPR = re.compile(r"\$\{\{([^}]*)\}\}")
_WORKFLOW_NAME = re.compile(r"\b(?:env|vars|secrets)\.([A-Z][A-Z0-9_]*)")


def workflow_reads(text: str) -> set[str]:
    """The workflow's ${{ env.X }}, ${{ vars.X }} (repository variables) and ${{ secrets.X }}, and
    what its run: lines read as bash."""
    names = {n for e in _WORKFLOW_EXPR.findall(text) for n in _WORKFLOW_NAME.findall(e)}
    runs = "\n".join(re.findall(r"^\s*(?:- )?run: \|?(.*(?:\n(?:\s{10,}.*))*)", text, re.M))
    return names | (bash_names(_WORKFLOW_EXPR.sub("", runs))[0])


def ci_reads() -> tuple[dict[str, set[str]], set[str]]:
    """name -> .ci/ files reading it; and every name a .ci/ script sets (for the programs it runs)."""
    reads: dict[str, set[str]] = {}
    sets: set[str] = set()
    for f in ci_scripts():
        text = f.read_text()
        r, s = bash_names(text)
        r |= set(_PY_IN_SHELL.findall(text))
        sets |= s
        for n in r:
            reads.setdefault(n, set()).add(str(f.relative_to(ROOT)))
    for f in sorted(CI.glob("*.yml")):
        for n in workflow_reads(f.read_text()):
            reads.setdefault(n, set()).add(str(f.relative_to(ROOT)))
    return reads, sets


def c_reads() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for r in PRODUCT_C:
        for f in sorted((ROOT / r).rglob("*")):
            if f.suffix in (".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".cuh"):
                for n in re.findall(r'getenv\(\s*"([A-Z][A-Z0-9_]*)"', f.read_text()):
                    found.setdefault(n, set()).add(str(f.relative_to(ROOT)))
    return found


@functools.cache
def names_read() -> dict[str, set[str]]:
    """Every variable the product or .ci/ reads -> the files that read it. A variable a .ci/
    script sets for the tests it runs (tests/guest: NUMABENCH_GUEST_REQUIRED, ...) counts as read
    by the tests that read it; names the tests alone read and set are not the product's."""
    out: dict[str, set[str]] = {}
    ci, ci_sets = ci_reads()
    product = _py_files(*PRODUCT_PY)
    consts = _env_constants({f: ast.parse(f.read_text()) for f in product if "_ENV" in f.read_text()})
    for part in (python_reads(product, consts), c_reads(), ci):
        for n, files in part.items():
            out.setdefault(n, set()).update(files)
    quoted = re.compile("|".join(rf"[\"']{n}[\"']" for n in sorted(ci_sets)))
    tests = [f for f in _py_files("tests") if quoted.search(f.read_text())]
    for n, files in python_reads(tests, consts).items():
        if n in ci_sets:
            out.setdefault(n, set()).update(files)
    return {n: f for n, f in out.items() if n not in GENERIC}


# -- the page -------------------------------------------------------------------------------

def page_rows() -> list[tuple[str, list[str]]]:
    """(name, cells) for each name of each table row of docs/ENV.md whose first cell holds the
    row's names, `NAME` or `NAME`, `OTHER`."""
    rows = []
    for line in PAGE.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if re.fullmatch(r"`[A-Z][A-Z0-9_]*`(?:, `[A-Z][A-Z0-9_]*`)*", cells[0]):
            rows += [(n, cells) for n in re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])]
    return rows


def test_the_page_lists_every_variable_read_and_only_those():
    read = names_read()
    rows = page_rows()
    listed = [n for n, _ in rows]
    missing = sorted(set(read) - set(listed))
    unread = sorted(set(listed) - set(read))
    twice = sorted({n for n in listed if listed.count(n) > 1})
    problems = []
    if missing:
        problems.append("read by the code but not on docs/ENV.md: " + ", ".join(
            f"{n} ({', '.join(sorted(read[n]))})" for n in missing))
    if unread:
        problems.append(f"on docs/ENV.md but read by nothing: {', '.join(unread)}")
    if twice:
        problems.append(f"listed more than once on docs/ENV.md: {', '.join(twice)}")
    assert not problems, "; ".join(problems)


def test_each_row_names_files_that_read_it():
    """The "read by" cell names files (or folders) that the scan finds reading the variable."""
    read = names_read()
    wrong = []
    for name, cells in page_rows():
        assert len(cells) == 4, f"{name}: a row has 4 cells (name, default, read by, meaning): {cells}"
        paths = re.findall(r"`([\w./-]+)`", cells[2])
        assert paths, f"{name}: no file in its read-by cell {cells[2]!r}"
        wrong += [f"{name}: {p}" for p in paths
                  if not any(f == p or (p.endswith("/") and f.startswith(p)) for f in read.get(name, ()))]
    assert not wrong, "read-by cells naming files that do not read the variable: " + "; ".join(wrong)


def test_the_scan_finds_reads_in_each_form():
    """The scanners themselves, on one line of each form the sources use."""
    r, s = bash_names('AA=${NUMABENCH_X:-1}\n[ -n "${NUMABENCH_Y:-}" ] && echo "$NUMABENCH_Y"\n'
                      'echo "$NUMABENCH_Z" \'$NUMABENCH_Q\' # $NUMABENCH_C\nNUMABENCH_W=1 cmd "$NUMABENCH_W"\n'
                      "python3 - <<'EOF'\nprint('$NUMABENCH_H')\nEOF\necho \"export NUMABENCH_G=1\"\n")
    assert r == {"NUMABENCH_X", "NUMABENCH_Y", "NUMABENCH_Z"}, r
    assert s >= {"AA", "NUMABENCH_W", "NUMABENCH_G"}, s
    assert workflow_reads("env:\n  A: ${{ vars.NUMABENCH_V || '3' }}\n  B: ${{ secrets.NUMABENCH_S }}\n") == \
        {"NUMABENCH_V", "NUMABENCH_S"}
    found = python_reads([ROOT / "numabench/faults.py", ROOT / "numabench/cases.py"])
    assert {"NUMABENCH_FAULT", "NUMABENCH_FAULT_ONCE", "NUMABENCH_CHUNK_ELEMS"} <= set(found), found
