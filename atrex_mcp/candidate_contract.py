"""What a valid candidate kernel is: the one static definition that validate, package,
package_run, the run memory, bench's collection and the wiki's kernel tests all apply.

A candidate is ONE self-contained Python file that defines `Model(torch.nn.Module)` with the
reference's `__init__`/`forward` parameters, imports only allow-listed modules, reaches no file,
process, network or native-code entry point, and really uses the target DSL (Model.forward
reaches an @triton.jit kernel). A top-level `if __name__ == "__main__":` block is test code: the
file is judged, and packaged, without it.

This check is a courtesy for packaging, not the security boundary. Python reaches anything from
anything (introspection, aliases, C extensions), so no static checker of it is complete; what
stops a hostile kernel is the worker's runtime sandbox (sandbox/: seccomp, Landlock, network
namespace, resource limits). The check exists so an honest kernel learns early, with the rule,
the line and the fix, that package would refuse it, and so the plain ways to read files or reach
the network never ship in an artifact. It uses allow-lists where honest kernels permit:
* imports: only ALLOWED_IMPORTS. `os` is allowed for reading environment variables only
  (os.environ.get, os.environ[...], `in os.environ`, os.getenv): kernels pick an
  interpreter-safe code path on TRITON_INTERPRET, and a read reveals nothing the worker could
  not read anyway; every other os function, and any write to the environment, is refused;
* modules are used through their attributes only (never bound to a name, passed or patched),
  less DENIED_MEMBERS (files, processes, network, native code, operator registration);
* attribute names: dunders only from SAFE_DUNDERS; private names only on self/cls (and private
  ATen operators called as torch._x(...)); the names in DENIED_ATTRIBUTES on no object at all
  (an object's type is unknown statically); `load` and `save` only under triton.language
  (tl.load), since elsewhere they read or write files;
* no dynamic lookup: getattr/setattr/delattr/hasattr only as direct calls with a literal name;
  no eval, exec, compile, __import__, open, globals, vars, locals;
* string annotations are code (typing.get_type_hints evaluates them): each is parsed and
  checked like the rest of the file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

from pydantic import BaseModel, Field

from atrex_mcp.errors import AtrexError

ALLOWED_IMPORTS = frozenset(
    {
        "__future__",
        "math",
        "typing",
        "functools",
        "dataclasses",
        "itertools",
        "operator",
        "enum",
        "numbers",
        "collections",
        "torch",
        "triton",
        "os",
    }
)
# Refused as file_or_network_access (they reach files, processes, the network or load code);
# any other module outside ALLOWED_IMPORTS is refused as import_not_allowed.
ACCESS_MODULES = frozenset(
    {
        "sys",
        "io",
        "socket",
        "subprocess",
        "pathlib",
        "urllib",
        "requests",
        "http",
        "ctypes",
        "cffi",
        "importlib",
        "shutil",
        "pickle",
        "tempfile",
        "glob",
        "builtins",
        "multiprocessing",
        "threading",
        "signal",
        "mmap",
        "ssl",
        "numpy",
        "marshal",
        "shelve",
        "runpy",
        "pkgutil",
        "zipimport",
        "inspect",
        "gc",
        "types",
        "code",
        "codeop",
        "linecache",
        "asyncio",
        "concurrent",
        "fcntl",
        "resource",
        "pty",
        "posix",
        "nt",
        "zipfile",
        "tarfile",
        "sqlite3",
        "ftplib",
        "smtplib",
        "webbrowser",
        "platform",
        "site",
        "faulthandler",
        "logging",
        "copyreg",
        "dbm",
    }
)
# Modules that torch and triton re-export as attributes (torch.os, triton.runtime.build.subprocess).
MODULE_ATTRIBUTES = frozenset(
    {
        "os",
        "sys",
        "subprocess",
        "socket",
        "builtins",
        "importlib",
        "ctypes",
        "shutil",
        "pickle",
        "tempfile",
        "multiprocessing",
        "pathlib",
        "urllib",
        "marshal",
        "shelve",
        "runpy",
        "mmap",
        "ssl",
        "linecache",
        "zipimport",
        "pkgutil",
        "inspect",
        "gc",
        "faulthandler",
        "io",
    }
)
# The only members of `os` a candidate may touch: reading the environment.
OS_READS = frozenset(
    {
        "os.environ",
        "os.getenv",
        "os.environ.get",
        "os.environ.keys",
        "os.environ.items",
        "os.environ.values",
        "os.environ.copy",
    }
)
FORBIDDEN_NAMES = frozenset(
    {
        "open",
        "eval",
        "exec",
        "compile",
        "__import__",
        "input",
        "breakpoint",
        "globals",
        "locals",
        "vars",
        "help",
        "__builtins__",
        "__build_class__",
        "__loader__",
        "__spec__",
    }
)
ATTRIBUTE_FUNCTIONS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
SAFE_DUNDERS = frozenset(
    {
        "__init__",
        "__name__",
        "__qualname__",
        "__doc__",
        "__class__",
        "__call__",
        "__len__",
        "__getitem__",
        "__setitem__",
        "__contains__",
        "__iter__",
        "__next__",
        "__enter__",
        "__exit__",
        "__post_init__",
        "__repr__",
        "__str__",
        "__eq__",
        "__ne__",
        "__lt__",
        "__le__",
        "__gt__",
        "__ge__",
        "__hash__",
        "__bool__",
        "__index__",
        "__int__",
        "__float__",
        "__add__",
        "__sub__",
        "__mul__",
        "__truediv__",
        "__floordiv__",
        "__mod__",
        "__pow__",
        "__neg__",
        "__matmul__",
        "__and__",
        "__or__",
        "__xor__",
        "__invert__",
    }
)
# Members of allowed modules that read or write files, load native code, start processes, reach
# the network or change operators process-wide; a prefix covers everything under it.
DENIED_MEMBERS = (
    "torch.load",
    "torch.save",
    "torch.from_file",
    "torch.hub",
    "torch.package",
    "torch.utils",
    "torch.serialization",
    "torch.storage",
    "torch.multiprocessing",
    "torch.distributed",
    "torch.ops.load_library",
    "torch.ops.import_module",
    "torch.classes",
    "torch.set_default_tensor_type",
    "torch.jit.load",
    "torch.jit.save",
    "torch.jit.CompilationUnit",
    "torch.cuda.memory",
    "torch.cuda.jiterator",
    "torch.cuda.tunable",
    "torch.profiler",
    "torch.autograd.profiler",
    "torch.onnx",
    "torch.export",
    "torch.compiler",
    "torch.library",
    "torch.fx",
    "triton.runtime.cache",
    "triton.runtime.build",
    "triton.tools",
    "triton.testing",
    "triton.knobs",
    "triton.backends",
    "typing.get_type_hints",
    "typing.ForwardRef",
    "operator.attrgetter",
    "operator.methodcaller",
)
# Attribute names refused on any object: entry points of the kind above that are also reachable
# from values (storages, arrays, aliases), and modules re-exported as attributes (torch.os).
DENIED_ATTRIBUTES = MODULE_ATTRIBUTES | frozenset(
    {
        "from_file",
        "load_library",
        "load_url",
        "load_state_dict_from_url",
        "download_url_to_file",
        "tofile",
        "dump",
        "share_memory_",
        "to_folder",
        "CUDAPluggableAllocator",
        "change_current_allocator",
        "get_type_hints",
        "ForwardRef",
        "attrgetter",
        "methodcaller",
        "serialization",
        "hub",
        "model_zoo",
        "cpp_extension",
        "jiterator",
        "CompilationUnit",
        "f_globals",
        "f_locals",
        "f_back",
        "f_builtins",
        "f_code",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "cr_code",
        "ag_frame",
        "tb_frame",
        "tb_next",
        "co_code",
        "import_module",
        "set_default_tensor_type",
    }
)
# load/save read or write files everywhere but in Triton, whose tl.load moves tensor data.
FILE_VERBS = frozenset({"load", "save"})
TRITON_LANGUAGE = "triton.language"
ENVIRON_READ_METHODS = frozenset({"get", "keys", "items", "values", "copy"})
MAX_ANNOTATION_DEPTH = 4
# One entry point can trip several of these rules at once (torch.hub.load_url); one report a line is enough.
ONCE_PER_LINE = frozenset({"file_or_network_access", "forbidden_attribute"})
DSL_DECORATORS = {"triton": ("triton.jit",)}
MODEL_CLASS = "Model"
REACHES = "it reaches files, processes, the network or native code"
ENV_READS_ONLY = "only environment reads (os.environ, os.getenv) are allowed"

FIXES = {
    "syntax": "Make the file valid Python 3 (python3 -m py_compile FILE shows the error).",
    "self_contained": "Inline what the sibling module provides: the artifact is one file.",
    "import_not_allowed": f"Import only from {', '.join(sorted(ALLOWED_IMPORTS))}; "
    "write the helper in the file instead.",
    "file_or_network_access": "Remove it: a kernel computes from its inputs only (to read an environment variable, "
    "use os.environ.get('NAME')).",
    "forbidden_name": "Call what you need directly; eval, exec, compile, __import__, open, globals, vars and locals "
    "are not available to a kernel.",
    "forbidden_attribute": "Use the public API (torch.x, tl.x); interpreter internals are off limits, and private "
    "attributes are allowed on self/cls only.",
    "dynamic_attribute": "Write the attribute out (obj.name) or use getattr(obj, 'name') with a literal name.",
    "module_as_value": "Use a module through its attributes (torch.empty, tl.load); do not bind, pass or store it.",
    "module_patched": "Do not assign to or delete attributes of imported modules; "
    "keep state on self or in your own names.",
    "string_annotation": "Write the annotation as an expression (x: torch.Tensor), not as a string.",
    "no_model": "Define a top-level class Model(torch.nn.Module).",
    "model_not_module": "Derive Model from torch.nn.Module.",
    "signature_mismatch": "Give Model.__init__ and Model.forward the reference's parameters, in the reference's order.",
    "dsl_not_used": "Launch at least one @triton.jit kernel from Model.forward "
    "(directly, through a helper, or self.<attr>).",
    "test_code": "Move tests out of the file, or under `if __name__ == '__main__':` (packaging removes that block).",
}
RULES = frozenset(FIXES)


class Violation(BaseModel):
    rule: str = Field(description="Which contract rule failed: " + ", ".join(FIXES) + ".")
    message: str = Field(description="What is wrong.")
    line: int | None = Field(default=None, description="Line in the file, where it applies.")
    fix: str = Field(default="", description="What to change so the rule holds.")

    def describe(self) -> str:
        """`rule (line N): message` — one line for logs and error messages."""
        return f"{self.rule}{f' (line {self.line})' if self.line else ''}: {self.message}"


class ContractReport(BaseModel):
    """Result of the output-contract check of one file."""

    passed: bool = Field(description="True when no rule was violated: package will accept the file.")
    violations: list[Violation] = Field(default_factory=list)
    warnings: list[str] = Field(
        default_factory=list,
        description="Allowed, but worth knowing (e.g. torch.compile inside the kernel counts as non-DSL time).",
    )
    kernels: list[str] = Field(default_factory=list, description="DSL kernels (@triton.jit) that forward reaches.")


class ContractRefused(AtrexError):
    """A file refused by the output contract: the error names each rule, line and fix."""

    def __init__(self, report: ContractReport, what: str = "The kernel"):
        fixes = list(dict.fromkeys(f"{v.rule}: {v.fix}" for v in report.violations if v.fix))
        super().__init__(
            "policy",
            "contract_violation",
            f"{what} breaks the output contract: {'; '.join(v.describe() for v in report.violations)}.",
            "Fix each listed rule. " + " ".join(fixes),
        )
        self.report = report


def _matches(dotted: str, prefixes: tuple[str, ...] | frozenset[str]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)


def _denied_member(dotted: str) -> str | None:
    """The denied member `dotted` names, also when it reaches an allowed module again through a
    module that re-exports it (torch.nn.modules.module.torch.distributed)."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part in ALLOWED_IMPORTS and _matches(".".join(parts[i:]), DENIED_MEMBERS):
            return ".".join(parts[i:])
    return None


def _literal_name(call: ast.Call) -> str | None:
    """The attribute name of getattr(obj, 'name', …) when it is a literal string."""
    if len(call.args) >= 2 and isinstance(call.args[1], ast.Constant) and isinstance(call.args[1].value, str):
        return call.args[1].value
    return None


def _is_attribute_call(node: ast.AST | None) -> TypeGuard[ast.Call]:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS


def _called_name(call: ast.Call) -> str:
    """The plain name a call calls (`getattr` in getattr(...)), or "" for anything else."""
    return call.func.id if isinstance(call.func, ast.Name) else ""


@dataclass
class _Signature:
    names: list[str]
    positional: list[str]
    required: set[str]
    var_keyword: bool


def _signature(fn: ast.FunctionDef) -> _Signature:
    a = fn.args
    positional = [x.arg for x in a.posonlyargs + a.args][1:]  # drop self
    kwonly = [x.arg for x in a.kwonlyargs]
    n_pos_defaults = len(a.defaults)
    required = set(positional[: len(positional) - n_pos_defaults] if n_pos_defaults else positional)
    required |= {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is None}
    return _Signature(
        names=positional + kwonly, positional=positional, required=required, var_keyword=a.kwarg is not None
    )


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | None:
    return next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


class _ContractScan:
    """One pass over a candidate's AST collecting violations."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.violations: list[Violation] = []
        self.warnings: list[str] = []
        self.aliases: dict[str, str] = {}  # bound name -> dotted path it stands for
        self.modules: set[str] = set()  # names bound by `import` statements (module objects)
        self.parents: dict[int, ast.AST] = {}

    def add(self, rule: str, message: str, node: ast.AST | None = None) -> None:
        line = getattr(node, "lineno", None)
        once_per_line = rule in ONCE_PER_LINE
        if any(v.rule == rule and v.line == line and (once_per_line or v.message == message) for v in self.violations):
            return
        self.violations.append(Violation(rule=rule, message=message, line=line, fix=FIXES[rule]))

    # ------------------------------------------------------------ names and chains
    def dotted(self, node: ast.AST) -> str | None:
        """`a.b.c` (and getattr(a.b, 'c')) with the leading name mapped through the file's aliases."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif (
                _is_attribute_call(node)
                and _called_name(node) == "getattr"
                and node.args
                and (name := _literal_name(node))
            ):
                parts.append(name)
                node = node.args[0]
            else:
                break
        if not isinstance(node, ast.Name) or node.id not in self.aliases:
            return None
        parts.append(self.aliases[node.id])
        return ".".join(reversed(parts))

    def _root_name(self, node: ast.AST) -> ast.Name | None:
        while isinstance(node, ast.Attribute):
            node = node.value
        return node if isinstance(node, ast.Name) else None

    # ------------------------------------------------------------ imports
    def imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                self.add("self_contained", "relative import: the file must not depend on sibling modules", node)
                continue
            if isinstance(node, ast.Import):
                bindings = [
                    (a.name, a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0], True)
                    for a in node.names
                ]
            elif isinstance(node, ast.ImportFrom):
                bindings = [
                    (f"{node.module}.{a.name}", a.asname or a.name, f"{node.module}.{a.name}", False)
                    for a in node.names
                ]
            else:
                continue
            for full, bound, target, is_module in bindings:
                root = full.split(".")[0]
                self.aliases[bound] = target
                if is_module:
                    self.modules.add(bound)
                if full.endswith(".*"):
                    self.add("import_not_allowed", f"from {full[:-2]} import *: import the names you use", node)
                elif root in ACCESS_MODULES:
                    self.add("file_or_network_access", f"import of {root}: {REACHES}", node)
                elif root not in ALLOWED_IMPORTS:
                    allowed = ", ".join(sorted(ALLOWED_IMPORTS))
                    self.add("import_not_allowed", f"import of {full}: only {allowed} may be imported", node)
                elif root == "os" and full not in ("os", *OS_READS):
                    self.add("file_or_network_access", f"import of {full}: {ENV_READS_ONLY}", node)
                elif _matches(full, DENIED_MEMBERS):
                    self.add("file_or_network_access", f"import of {full}: {REACHES}", node)

    def assignment_aliases(self) -> None:
        """`c = torch.cuda` makes `c.memory` mean torch.cuda.memory (flow-insensitive, names only)."""
        for _ in range(3):  # chains of aliases settle in a few rounds
            for node in ast.walk(self.tree):
                if isinstance(node, ast.Assign):
                    targets, value = node.targets, node.value
                elif isinstance(node, ast.NamedExpr | ast.AnnAssign) and node.value is not None:
                    targets, value = [node.target], node.value
                else:
                    continue
                dotted = self.dotted(value)
                if dotted is not None:
                    for t in targets:
                        if isinstance(t, ast.Name) and t.id not in self.modules:
                            self.aliases[t.id] = dotted

    # ------------------------------------------------------------ code
    def code(self, root: ast.AST) -> None:
        for parent in ast.walk(root):
            for child in ast.iter_child_nodes(parent):
                self.parents[id(child)] = parent
        for node in ast.walk(root):
            if isinstance(node, ast.Name):
                self._name(node)
            elif isinstance(node, ast.Attribute):
                self._attribute(node, node.attr, node.value, node.ctx)
            elif _is_attribute_call(node):
                self._attribute_call(node)

    def _name(self, node: ast.Name) -> None:
        parent = self.parents.get(id(node))
        if node.id in FORBIDDEN_NAMES:
            self.add("forbidden_name", f"use of {node.id}: no file access, code evaluation or namespace lookups", node)
        elif node.id in ATTRIBUTE_FUNCTIONS and not (isinstance(parent, ast.Call) and parent.func is node):
            self.add("dynamic_attribute", f"{node.id} passed as a value: attribute names must be literal", node)
        if not isinstance(node.ctx, ast.Load):
            return
        if node.id in self.modules and not self._used_through_attribute(node, parent):
            self.add("module_as_value", f"module {self.aliases[node.id]} used as a value", node)
        if self.aliases.get(node.id) == "os.environ":
            self._environ_read(node)

    @staticmethod
    def _used_through_attribute(node: ast.AST, parent: ast.AST | None) -> bool:
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return True
        return _is_attribute_call(parent) and parent.args[:1] == [node]

    def _attribute_call(self, node: ast.Call) -> None:
        name = _literal_name(node)
        if name is None:
            self.add("dynamic_attribute", f"{_called_name(node)} with a computed attribute name", node)
            return
        ctx = ast.Load() if _called_name(node) in ("getattr", "hasattr") else ast.Store()
        self._attribute(node, name, node.args[0], ctx)

    def _attribute(self, node: ast.expr, attr: str, value: ast.AST, ctx: ast.expr_context) -> None:
        root = self._root_name(value)
        base = self.dotted(value)
        dotted = f"{base}.{attr}" if base else None
        parent = self.parents.get(id(node))
        outermost = not (isinstance(parent, ast.Attribute) and parent.value is node)
        called = isinstance(parent, ast.Call) and parent.func is node
        if dotted and outermost and dotted.split(".")[0] == "os" and dotted not in OS_READS:
            self.add("file_or_network_access", f"use of {dotted}: {ENV_READS_ONLY}", node)
        elif dotted and outermost and _denied_member(dotted):
            self.add("file_or_network_access", f"use of {_denied_member(dotted)}: {REACHES}", node)
        if attr in DENIED_ATTRIBUTES:
            self.add("file_or_network_access", f"access to .{attr}: {REACHES}", node)
        if attr in FILE_VERBS and not (dotted or "").startswith(TRITON_LANGUAGE + "."):
            self.add("file_or_network_access", f"access to .{attr}: outside Triton (tl.{attr}) it moves files", node)
        if attr.startswith("__") and attr.endswith("__"):
            if attr not in SAFE_DUNDERS:
                self.add("forbidden_attribute", f"access to .{attr}: interpreter internals are off limits", node)
        elif attr.startswith("_") and not self._private_allowed(value, base, called):
            self.add("forbidden_attribute", f"access to private attribute .{attr} outside self/cls", node)
        if root is not None and root.id in self.aliases and not isinstance(ctx, ast.Load):
            self.add("module_patched", f"assignment to {dotted or attr}: imported modules must not be changed", node)
        if dotted == "os.environ":
            self._environ_read(node)
        if dotted == "torch.compile":
            self.warnings.append(
                f"line {node.lineno}: torch.compile generates Inductor kernels, which count as non-DSL time"
            )

    @staticmethod
    def _private_allowed(value: ast.AST, base: str | None, called: bool) -> bool:
        """Private names on self/cls; and private ATen operators called as torch._x(…) or
        torch.ops.<ns>._x(…) (torch._scaled_mm), which are operators, not internals."""
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            return True
        return called and (base == "torch" or ((base or "").count(".") == 2 and (base or "").startswith("torch.ops.")))

    def _environ_read(self, node: ast.AST) -> None:
        """os.environ only as os.environ['X'], os.environ.get(...) and friends, or `'X' in os.environ`."""
        parent = self.parents.get(id(node))
        grand = self.parents.get(id(parent)) if parent is not None else None
        if isinstance(parent, ast.Subscript) and parent.value is node and isinstance(parent.ctx, ast.Load):
            return
        if (
            isinstance(parent, ast.Attribute)
            and parent.value is node
            and parent.attr in ENVIRON_READ_METHODS
            and isinstance(grand, ast.Call)
            and grand.func is parent
        ):
            return
        if (
            isinstance(parent, ast.Compare)
            and node in parent.comparators
            and all(isinstance(op, ast.In | ast.NotIn) for op in parent.ops)
        ):
            return
        self.add(
            "file_or_network_access",
            "os.environ may only be read: os.environ.get('X'), os.environ['X'] or 'X' in os.environ",
            node,
        )

    # ------------------------------------------------------------ string annotations
    def annotations(self) -> None:
        for expression in self._string_annotations(self.tree, 0):
            self.code(expression)

    def _string_annotations(self, root: ast.AST, depth: int) -> Iterator[ast.AST]:
        for node in ast.walk(root):
            annotations: list[ast.AST] = []
            if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
                annotations.append(node.annotation)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
                annotations.append(node.returns)
            elif depth and node is root:
                annotations.append(node)
            for annotation in annotations:
                for constant in self._annotation_strings(annotation):
                    yield from self._parsed_annotation(constant, depth)

    def _annotation_strings(self, node: ast.AST) -> Iterator[ast.Constant]:
        """String constants in type positions of an annotation: not call arguments (code, checked
        as such) and not Literal[...] values (data, never evaluated)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node
        elif isinstance(node, ast.Subscript):
            yield from self._annotation_strings(node.value)
            if not str(self.dotted(node.value) or getattr(node.value, "id", "")).endswith("Literal"):
                yield from self._annotation_strings(node.slice)
        elif isinstance(node, ast.Tuple | ast.List | ast.BinOp):
            for child in ast.iter_child_nodes(node):
                yield from self._annotation_strings(child)

    def _parsed_annotation(self, constant: ast.Constant, depth: int) -> Iterator[ast.AST]:
        if depth >= MAX_ANNOTATION_DEPTH:
            self.add("string_annotation", "string annotation nested too deeply", constant)
            return
        text = str(constant.value)  # _annotation_strings yields string constants only
        try:
            expression = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            self.add("string_annotation", f"string annotation {text[:40]!r} is not an expression", constant)
            return
        for inner in ast.walk(expression):
            if hasattr(inner, "lineno"):
                inner.lineno = constant.lineno
        yield expression
        yield from self._string_annotations(expression, depth + 1)

    # ------------------------------------------------------------ shape of the file
    def test_code(self) -> None:
        for node in self.tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                self.add("test_code", f"test function {node.name} in the artifact", node)

    def model(self, reference: ast.Module) -> ast.ClassDef | None:
        cls = _find_class(self.tree, MODEL_CLASS)
        if cls is None:
            self.add("no_model", "no top-level class Model")
            return None
        bases = [self.dotted(b) or (b.id if isinstance(b, ast.Name) else "") for b in cls.bases]
        if not any(b.endswith("Module") for b in bases):
            self.add("model_not_module", "class Model does not derive from torch.nn.Module", cls)
        ref_cls = _find_class(reference, MODEL_CLASS)
        if ref_cls is None:
            raise AtrexError("internal", "bad_reference", "The reference has no class Model.")
        for method in ("__init__", "forward"):
            self._compare(method, _method(ref_cls, method), _method(cls, method), cls)
        return cls

    def _compare(
        self, method: str, ref: ast.FunctionDef | None, cand: ast.FunctionDef | None, cls: ast.ClassDef
    ) -> None:
        ref_sig = _signature(ref) if ref else _Signature([], [], set(), False)
        if cand is None:
            if ref_sig.names:
                takes = ", ".join(ref_sig.names)
                self.add("signature_mismatch", f"Model has no {method}; the reference's takes {takes}", cls)
            return
        sig = _signature(cand)
        missing = [n for n in ref_sig.names if n not in sig.names and not sig.var_keyword]
        extra_required = sorted(sig.required - set(ref_sig.names))
        if missing:
            self.add(
                "signature_mismatch", f"Model.{method} lacks parameter(s) {', '.join(missing)} of the reference", cand
            )
        if extra_required:
            extra = ", ".join(extra_required)
            self.add(
                "signature_mismatch", f"Model.{method} requires parameter(s) {extra} the reference does not pass", cand
            )
        reordered = sig.positional[: len(ref_sig.positional)] != ref_sig.positional
        if method == "forward" and not missing and reordered and not sig.var_keyword:
            self.add(
                "signature_mismatch",
                f"Model.forward takes ({', '.join(sig.positional)}); "
                f"the reference's order is ({', '.join(ref_sig.positional)})",
                cand,
            )

    def dsl(self, cls: ast.ClassDef | None, dsl: str) -> list[str]:
        decorators = DSL_DECORATORS.get(dsl)
        if decorators is None:
            raise AtrexError(
                "input", "unknown_dsl", f"No output contract for DSL {dsl!r}.", f"Known: {', '.join(DSL_DECORATORS)}"
            )
        functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        kernels = set()
        for name, fn in functions.items():
            for dec in fn.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if (self.dotted(target) or "") in decorators:
                    kernels.add(name)
        if cls is None:
            return []
        forward = _method(cls, "forward")
        if not kernels:
            self.add("dsl_not_used", f"no @{decorators[0]} kernel in the file")
            return []
        if forward is None:
            return []
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
        self_kernels = self._self_kernel_attributes(methods.get("__init__"), kernels)
        reached: set[str] = set()
        seen: set[str] = set()
        todo: list[ast.FunctionDef] = [forward]
        while todo:
            fn = todo.pop()
            if fn.name in seen and fn is not forward:
                continue
            seen.add(fn.name)
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    if node.id in kernels:
                        reached.add(node.id)
                    elif node.id in functions and node.id not in seen:
                        todo.append(functions[node.id])
                elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                    if node.attr in self_kernels:
                        reached.add(self_kernels[node.attr])
                    elif node.attr in methods and node.attr not in seen:
                        todo.append(methods[node.attr])
        if not reached:
            defined = ", ".join(sorted(kernels))
            self.add(
                "dsl_not_used",
                f"Model.forward never reaches a @{decorators[0]} kernel ({defined} defined but not launched)",
                forward,
            )
        return sorted(reached)

    @staticmethod
    def _self_kernel_attributes(init: ast.FunctionDef | None, kernels: set[str]) -> dict[str, str]:
        """`self.k = some_kernel` in __init__: forward may launch it as self.k[grid](…)."""
        found: dict[str, str] = {}
        if init is None:
            return found
        for node in ast.walk(init):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in kernels:
                for t in node.targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        found[t.attr] = node.value.id
        return found


def _is_main_block(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == "__main__"
    )


def strip_main_block(source: str) -> tuple[str, list[str]]:
    """Remove top-level `if __name__ == "__main__":` blocks; returns the text and what was removed."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, []
    lines = source.splitlines(keepends=True)
    removed: list[str] = []
    for node in reversed(tree.body):
        if _is_main_block(node):
            start, end = node.lineno, node.end_lineno or node.lineno
            del lines[start - 1 : end]
            removed.append(f"lines {start}-{end}: if __name__ == '__main__' block")
    return "".join(lines).rstrip() + "\n", list(reversed(removed))


def check_contract(source: str, reference_source: str, *, dsl: str = "triton") -> ContractReport:
    """Check one file against the output contract (static; nothing is imported or run). A
    top-level `if __name__ == "__main__":` block is left out, as packaging leaves it out; lines
    are those of `source`."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        violation = Violation(rule="syntax", message=str(exc.msg), line=exc.lineno, fix=FIXES["syntax"])
        return ContractReport(passed=False, violations=[violation])
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting the parser cannot hold
        violation = Violation(
            rule="syntax", message=f"the file cannot be parsed: {type(exc).__name__}", fix=FIXES["syntax"]
        )
        return ContractReport(passed=False, violations=[violation])
    tree.body = [node for node in tree.body if not _is_main_block(node)]
    scan = _ContractScan(tree)
    try:
        scan.imports()
        scan.assignment_aliases()
        scan.code(tree)
        scan.annotations()
        scan.test_code()
        cls = scan.model(ast.parse(reference_source))
        kernels = scan.dsl(cls, dsl)
    except RecursionError:
        scan.add("syntax", "expressions nested too deeply to check")
        kernels = []
    violations = sorted(scan.violations, key=lambda v: v.line or 0)
    return ContractReport(passed=not violations, violations=violations, warnings=scan.warnings, kernels=kernels)
