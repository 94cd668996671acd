"""Outcomes are values: no module of ours decides anything by matching message text.

A decision read from a sentence breaks the day someone rewords the sentence, and nothing says so:
an exception is told by its class or errno, an HTTP answer by its status, an outcome of ours by a
typed value (an enum, a constant compared whole, a field). This AST walk over repro/, probes/ and
proxies/ finds the usual ways of reading a sentence:

- `"..." in str(exc)`, `str(exc).startswith(...)`, `str(exc) == "..."`, `re.search(p, str(exc))`;
- `in`, `startswith`/`endswith` or a regex applied to a variable or attribute whose name says it is
  prose: message, msg, text, reason, detail, summary, error, err, why, said, prose, note, outcome,
  how, description (the last word of the name: `error_texts` is a collection, `keepalive_how` prose).

Receivers are seen through `.lower()`, `.strip()` and slices; a function's `*args` is a tuple of
values, never prose (`def failed(self, *how)`: `kind in how`). Some such reads are not of our own
prose but of another program's wire format, whose words are all the signal it gives: ALLOWED lists
those, each with why. OWED lists real offences left for another change, each with its owner and
fix, so that they stay visible; it shrinks, it never grows.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("repro", "probes", "proxies")
PROSE_WORDS = frozenset({"message", "msg", "text", "reason", "detail", "summary", "error", "err", "why", "said",
                         "prose", "note", "outcome", "how", "description"})
SEEN_THROUGH = frozenset({"lower", "upper", "casefold", "strip", "lstrip", "rstrip"})
AFFIX_TESTS = frozenset({"startswith", "endswith"})
REGEX_CALLS = frozenset({"search", "match", "fullmatch", "findall", "finditer"})

# (module, function) -> why: "*" for the whole module, None for its top-level code. Another
# program's wire format only, or a test of text that is not an outcome at all.
ALLOWED: dict[tuple[str, str | None], str] = {
    ("repro/core/error_shapes.py", "*"):
        "reads the error bodies other software answers with (vLLM, SGLang, LiteLLM, Envoy, Caddy, nginx): "
        "their wording is the only sign of which of them answered; kept to this one module, whose tests "
        "hold each product's real body",
    ("repro/core/text.py", "http_error_text"):
        "an HTML error page names itself in its <title> and its writer in its signature line "
        "(nginx's <hr><center>nginx/1.22.1</center>): HTML is parsed, not a sentence of ours",
    ("probes/status_pages.py", "looks_like_stub_status"):
        "nginx's stub_status page is plain text whose first words are its format ('Active connections:')",
    ("probes/exposition.py", "_parse"):
        "Prometheus' text exposition format: an OpenMetrics page ends with the line '# EOF'",
    ("repro/commands/help.py", "DefaultsAndExamples._get_help_string"):
        "the subject is the help text itself: a flag whose help already states its default gets none added",
    ("repro/reporting/watch_rules.py", None):
        "a YAML representer picks the literal block style for a string that holds a newline: layout, not meaning",
    ("repro/reporting/run_report.py", "render_html"):
        "`summary` there is the run's summary dict: `k in summary` asks whether a count was recorded",
}

# (module, unparsed expression) -> owner and fix. Offences another change removes; never add one.
OWED: dict[tuple[str, str], str] = {}


def _name(node: ast.expr) -> str | None:
    """The identifier a receiver is read from, seen through case and whitespace calls and slices;
    "str()" for str(...)/repr(...)."""
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SEEN_THROUGH:
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("str", "repr"):
        return "str()"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def is_prose(node: ast.expr) -> bool:
    name = _name(node)
    return name is not None and (name == "str()" or name.lower().split("_")[-1] in PROSE_WORDS)


def _offence(node: ast.AST, tuples: frozenset[str]) -> bool:
    """`tuples`: the enclosing function's *args name, a tuple of values."""
    if isinstance(node, ast.Compare):
        for left, op, right in zip([node.left, *node.comparators[:-1]], node.ops, node.comparators, strict=True):
            if isinstance(op, (ast.In, ast.NotIn)) and is_prose(right) and not (
                    isinstance(right, ast.Name) and right.id in tuples):
                return True
            if isinstance(op, (ast.Eq, ast.NotEq)) and any(
                    _name(a) == "str()" and isinstance(b, ast.Constant) for a, b in ((left, right), (right, left))):
                return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in AFFIX_TESTS and is_prose(node.func.value):
            return True
        if node.func.attr in REGEX_CALLS and len(node.args) >= 2 and is_prose(node.args[1]):
            return True
    return False


def offences(source: str) -> list[tuple[int, str | None, str]]:
    """(line, enclosing function's qualified name or None, expression) of each offence."""
    found: list[tuple[int, str | None, str]] = []

    def walk(node: ast.AST, scope: list[str], tuples: frozenset[str]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = [*scope, node.name]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            tuples = frozenset({node.args.vararg.arg}) if node.args.vararg else frozenset()
        if _offence(node, tuples):
            found.append((node.lineno, ".".join(scope) or None, ast.unparse(node)))
        for child in ast.iter_child_nodes(node):
            walk(child, scope, tuples)

    walk(ast.parse(source), [], frozenset())
    return sorted(found)


def tree_offences() -> list[tuple[str, int, str | None, str]]:
    return [(str(path.relative_to(ROOT)), line, scope, expr)
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            for line, scope, expr in offences(path.read_text())]


def test_no_module_decides_by_matching_message_text():
    bad = [f"{path}:{line}: {expr}" for path, line, scope, expr in tree_offences()
           if (path, "*") not in ALLOWED and (path, scope) not in ALLOWED and (path, expr) not in OWED]
    assert not bad, ("decided from a sentence: use a typed outcome (enum, constant, field), the exception's "
                     "class or errno, or the HTTP status:\n" + "\n".join(bad))


def test_every_entry_still_names_code_that_exists():
    """An entry whose code is gone is removed: an ALLOWED one is no licence for whatever comes next,
    and an OWED one paid is struck off."""
    offences_found = tree_offences()
    scopes = {(path, scope) for path, _, scope, _ in offences_found}
    stale = [key for key in ALLOWED if not (ROOT / key[0]).is_file() or (key[1] != "*" and key not in scopes)]
    assert not stale, f"remove these ALLOWED entries of tests/test_no_text_matching.py: {stale}"
    expressions = {(path, expr) for path, _, _, expr in offences_found}
    paid = [key for key in OWED if key not in expressions]
    assert not paid, f"fixed: remove these OWED entries of tests/test_no_text_matching.py: {paid}"


def test_the_walk_finds_each_way_of_reading_a_sentence():
    source = '''
def f(exc, reply, failure, self):
    a = "refused" in str(exc)
    b = str(exc).startswith("Connection")
    c = str(exc) == "timed out"
    d = re.search("refused", repr(exc))
    e = "not cut" in reply.keepalive_how
    g = failure.error_message.lower().endswith("tools")
    h = self.reason[:20].startswith("interrupted")
    i = re.match(r"\\d+", summary)
    j = "tools" in failure.error
'''
    assert [line for line, _, _ in offences(source)] == [3, 4, 5, 6, 7, 8, 9, 10, 11]


def test_the_walk_leaves_values_and_collections_alone():
    source = '''
class C:
    def f(self, exc, status, kind, error_texts, path, line):
        a = exc.errno == errno.ECONNREFUSED
        b = isinstance(exc, ConnectionRefusedError)
        c = status in (502, 503)
        d = kind.startswith("engine-")
        e = self.error in error_texts
        g = path.endswith("/v1/models")
        h = line.startswith("data:")
        i = outcome == OK

    def failed(self, *how):
        return self.failure.failure in how
'''
    assert offences(source) == []
