"""The config's path through a job: where it stops, and how often it climbs back to a higher layer.

    python scripts/config_path.py [--rev REV]

Reads src/rlsweep at REV (git ls-tree/show, no checkout; default: the working tree), follows the job's config
statically from ``job.train_job``, prints a short summary and one JSON line: ``stops``, ``functions`` (distinct
stopped-in functions), ``modules`` (count, list), ``climbs``, ``stop_list`` ("module:function:defline <-
module:caller:callline", `` ^`` marking a climb). Issue 39 point 7 asks for this path before and after.

Definitions (static, from the AST; "config class": a dataclass named *Config in config.py or toggles/, and
TrainConfig, made there by make_dataclass):
- The config: the TrainConfig a job builds, its resolved plain dict, or a section of either. A section is an
  attribute (or ["key"]) named like a config class's field typed with a config class, ``algo`` (typed Any, an
  AlgoConfig) or a toggle's field whose ``schema`` is a config class. An expression is the config when it is
  a config name, a section of it, a config attribute of a holder (seat.cfg, self.a), a call of it (the lambda
  ``config()``), a copy (dataclasses.replace, OmegaConf.to_container, ...), a package call annotated to return
  a config class, a lambda returning it, or a list/tuple/``{**it}`` holding it. Config names: parameters
  annotated with a config class, parameters named like those anywhere in the package or ``resolved`` (train_job's
  ``cfg: DictConfig`` is one by name), parameters the config was passed to, names assigned or looped from it.
- Holders: a class with an attribute typed with a config class, named ``resolved`` or set to the config
  (_Seat: cfg, resolved; Algorithm: cfg, a; Settings: compile_config), or typed with / set to a holder
  (Runtime.settings), and its subclasses. Holder names: self in a holder, and anywhere the names of
  parameters or attributes typed with / set to a holder (seat, seats, todo, algo, rt, settings).
- A stop: a (function, caller) pair where a followed call passes the config as an argument, or passes a holder
  (argument or receiver) to a function that reads the config off a holder itself. A function given a holder it
  only passes on is followed, not counted. Calls are followed from train_job only where they pass the config or
  a holder. Nested defs and lambdas are part of the function holding them. A package function handed to a
  callable outside the package (functools.partial, Thread(target=, args=)) counts as called with its other
  arguments; one handed to a package function (a callback) is not followed.
- Calls resolve through imports (re-exports followed) and the module's own defs; ``self.m``, ``super().m`` and
  ``x.m`` with x's class known (annotation, ``X(...)``, a call annotated ``-> type[X]``: then ``x(...)`` is any
  subclass's __init__) go to X's method and every subclass's override; ``x.m`` on an unknown class goes to every
  package method named m (``toggle.apply`` reaches each toggle's apply).
- A climb: a stop whose module is a higher layer than its caller's. Layer: in the import graph (every import,
  module-level or in a function, not under ``if TYPE_CHECKING:``), 1 + the highest layer imported (leaves 0);
  an import closing a cycle is ignored (the summary counts them).

Blind spots: a config field passed alone (cfg.device, cfg.algo._target_: runner's algorithm_class) is no stop;
a callback a package function calls later (evaluate's policy, the W&B hooks) is not followed; names are
flow-insensitive and both branches of an ``if`` count; getattr/importlib dispatch and classes sharing a simple
name are not told apart. Calibration: at 86577a9 this gives 107 stops (73 functions) in 21 modules, 6 climbs,
against issue 39's 69/18/30 (its tool was not kept; the rules above were not tuned to meet it).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COPIES = {"replace", "deepcopy", "copy", "to_container", "asdict", "masked_copy", "structured", "create", "merge"}
Key = tuple[str, str]  # (module, "function" or "Class.method")


def read_package(rev: str | None) -> dict[str, ast.Module]:
    if rev is None:
        files = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "src/rlsweep").rglob("*.py")}
    else:
        def git(*a: str) -> str:
            return subprocess.run(["git", "-C", str(ROOT), *a], check=True, capture_output=True, text=True).stdout
        files = {n: git("show", f"{rev}:{n}") for n in git("ls-tree", "-r", "--name-only", rev, "src/rlsweep").split()
                 if n.endswith(".py")}
    parts = {path: Path(path).relative_to("src").with_suffix("").parts for path in files}
    return {".".join(p[:-1] if p[-1] == "__init__" else p): ast.parse(files[path]) for path, p in parts.items()}


def own_nodes(node: ast.AST):
    """A function's nodes, its nested defs and lambdas included, not a nested class's."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, ast.ClassDef):
            yield child
            yield from own_nodes(child)


def ann(node: ast.AST | None) -> str:
    return "" if node is None else ast.unparse(node)


def params(fn: ast.FunctionDef) -> list[ast.arg]:
    return fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs


def cls_of(key: Key) -> str | None:
    return key[1].split(".")[0] if "." in key[1] else None


class Package:
    """Modules, their imports and layers, functions and classes (classes by their simple name)."""

    def __init__(self, mods: dict[str, ast.Module]) -> None:
        self.mods, self.imports, self.deps, self.defs, self.classes = mods, {}, {}, {}, {}
        pkgs = {m for m in mods if any(o.startswith(m + ".") for o in mods)}
        for m, tree in mods.items():
            skip = {id(n) for i in ast.walk(tree) if isinstance(i, ast.If) and "TYPE_CHECKING" in ann(i.test)
                    for b in i.body for n in ast.walk(b)}
            self.imports[m], self.deps[m] = names, deps = {}, set()
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    pairs = [(a.asname or a.name.split(".")[0], a.asname and a.name or a.name.split(".")[0])
                             for a in node.names] + [(a.name, a.name) for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = m.split(".")[: len(m.split(".")) - node.level + (m in pkgs)] if node.level else []
                    src = ".".join(base + ([node.module] if node.module else []))
                    pairs = [(a.asname or a.name, f"{src}.{a.name}") for a in node.names]
                else:
                    continue
                for local, target in pairs:
                    names.setdefault(local, target)
                    while target and target not in mods:
                        target = target.rpartition(".")[0]
                    if target and target != m and not m.startswith(target + ".") and id(node) not in skip:
                        deps.add(target)
            for node in tree.body:
                members = node.body if isinstance(node, ast.ClassDef) else [node]
                self.classes.update({node.name: (m, node)} if isinstance(node, ast.ClassDef) else {})
                prefix = f"{node.name}." if isinstance(node, ast.ClassDef) else ""
                self.defs.update({(m, prefix + f.name): f for f in members if isinstance(f, ast.FunctionDef)})
        self.layers, self.cycles = {}, []
        for m in mods:
            self.layer(m, ())

    def layer(self, m: str, path: tuple[str, ...]) -> int:
        if m not in self.layers:
            below = [d for d in self.deps[m] if d not in path or self.cycles.append((m, d))]  # a cycle's import: noted
            self.layers[m] = 1 + max((self.layer(d, (*path, m)) for d in below), default=-1)
        return self.layers[m]

    def resolve(self, m: str, name: str, depth: int = 0) -> Key | None:
        """The package def or class ``name`` means in module m."""
        if (m, name) in self.defs or self.classes.get(name, ("",))[0] == m:
            return m, name
        mod, _, attr = self.imports.get(m, {}).get(name, "").rpartition(".")
        return self.resolve(mod, attr, depth + 1) if mod in self.mods and depth < 5 else None

    def bases(self, cls: str) -> list[str]:
        return [ann(b).rpartition(".")[2] for b in self.classes[cls][1].bases] if cls in self.classes else []

    def family(self, cls: str) -> set[str]:
        """cls and every package class that subclasses it."""
        out, more = {cls}, {cls}
        while more:
            more = {c for c in self.classes if set(self.bases(c)) & out} - out
            out |= more
        return out

    def methods(self, cls: str, name: str) -> list[Key]:
        """cls's own or inherited method ``name``, and every subclass's override of it."""
        found, up = [], cls
        while up in self.classes and not found:
            key = (self.classes[up][0], f"{up}.{name}")
            found, up = ([key] if key in self.defs else []), (self.bases(up) or [None])[0]
        return found + [k for c in self.family(cls) - {cls} if (k := (self.classes[c][0], f"{c}.{name}")) in self.defs]


class Config:
    """The config classes, sections, config names, holders and their attributes (see the definitions)."""

    def __init__(self, pkg: Package) -> None:
        self.pkg, where = pkg, ("rlsweep.config", "rlsweep.toggles")
        self.types = {c for c, (m, node) in pkg.classes.items() if m.startswith(where) and c.endswith("Config")
                      and any("dataclass" in ann(d) for d in node.decorator_list)}
        self.types |= {t.id for m in where for s in getattr(pkg.mods.get(m), "body", [])
                       if isinstance(s, ast.Assign) and "make_dataclass" in ann(s.value) for t in s.targets}
        self.sections, self.attrs, self.holders, self.holder_names = {"algo"}, set(), set(), set()
        for c, (m, node) in pkg.classes.items():
            body = {ann(t): s.value for s in node.body if isinstance(s, ast.Assign) for t in s.targets}
            if m.startswith(where) and ann(body.get("schema")) in self.types:
                self.sections.add(ast.literal_eval(body.get("field") or body["name"]))
            self.sections |= {ann(s.target) for s in node.body if c in self.types and isinstance(s, ast.AnnAssign)
                              and self.typed(s.annotation)}
        self.names = {a.arg for f in pkg.defs.values() for a in params(f) if self.typed(a.annotation)} | {"resolved"}
        for _ in range(3):  # attributes set to the config or to a holder, until nothing changes
            self.holder_names |= {a.arg for f in pkg.defs.values() for a in params(f) if self.typed(a.annotation, True)}
            for (m, name), f in pkg.defs.items():
                sc = Scope(self, f, set(), cls_of((m, name)), m)
                for n in own_nodes(f):
                    target = n.target if isinstance(n, ast.AnnAssign) else n.targets[0] if isinstance(n, ast.Assign) else None
                    if isinstance(target, ast.Attribute) and ann(target.value) in sc.types:
                        self.learn(target.attr, sc.types[ann(target.value)], getattr(n, "annotation", None), n.value, sc)
            for c, (_, node) in pkg.classes.items():
                for s in node.body:
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and c not in self.types:
                        self.learn(s.target.id, c, s.annotation, None, None)
            self.holders = set().union(*(pkg.family(c) for c in self.holders))

    def learn(self, attr: str, cls: str, annotation: ast.AST | None, value: ast.AST | None, sc: Scope | None) -> None:
        """``cls.attr`` holds the config when typed with a config class or set to it; a holder when set to one."""
        if self.typed(annotation) or attr == "resolved" or sc and value is not None and sc.carries(value):
            self.attrs.add(attr)
        elif self.typed(annotation, True) or sc and value is not None and (sc.class_of(value) or "") in self.holders:
            self.holder_names.add(attr)
        else:
            return
        self.holders |= set() if cls.startswith("type:") else {cls}

    def typed(self, node: ast.AST | None, holder: bool = False) -> bool:
        names, text = self.holders if holder else self.types, re.sub(r"type\[[^]]*\]", "", ann(node))  # a class is not one
        return bool(names) and bool(re.search(r"\b({})\b".format("|".join(sorted(names))), text))


class Scope:
    """One function's config names, holder names and known classes of its names (flow-insensitive)."""

    def __init__(self, c: Config, fn: ast.FunctionDef, given: set[str], cls: str | None, m: str) -> None:
        self.c, self.m, self.fn, names = c, m, fn, {a.arg for a in params(fn)}
        self.cfg = (given | c.names) & names | {a.arg for a in params(fn) if c.typed(a.annotation)}
        self.holders = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in c.holder_names}
        self.holders |= (names & c.holder_names) | ({"self"} if cls in c.holders else set())
        self.types = {"self": cls} if cls else {}
        self.types.update({a.arg: t for a in params(fn) if (t := ann(a.annotation).split(" |")[0]) in c.pkg.classes})
        for _ in range(3):  # assignments, loops, comprehensions, until nothing changes
            for n in own_nodes(fn):
                pairs = [(t, n.value) for t in n.targets] if isinstance(n, ast.Assign) else \
                    [(n.target, n.iter)] if isinstance(n, (ast.For, ast.comprehension)) else []
                for target, value in pairs:
                    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                        pairs += list(zip(target.elts, value.elts))
                    elif isinstance(target, ast.Name):
                        self.cfg |= {target.id} if self.carries(value) else set()
                        self.holders |= {target.id} if self.holder(value) else set()
                        self.types.update({target.id: t} if (t := self.class_of(value)) else {})

    def class_of(self, value: ast.AST) -> str | None:
        """X for ``X(...)``; "type:X" for a call annotated ``-> type[X]``."""
        ref = self.c.pkg.resolve(self.m, value.func.id) if isinstance(value, ast.Call) and \
            isinstance(value.func, ast.Name) else None
        returns = ann(self.c.pkg.defs[ref].returns) if ref in self.c.pkg.defs else ""
        return ref[1] if ref and ref[1] in self.c.pkg.classes else "type:" + returns[5:-1] if returns[:5] == "type[" else None

    def holder(self, e: ast.AST) -> bool:
        return ((isinstance(e, ast.Name) and e.id in self.holders) or (isinstance(e, ast.Subscript) and self.holder(e.value))
                or (isinstance(e, ast.Attribute) and e.attr in self.c.holder_names))

    def is_cfg(self, e: ast.AST) -> bool:
        if isinstance(e, ast.Attribute):
            return (e.attr in self.c.attrs and self.holder(e.value)) or (e.attr in self.c.sections and self.is_cfg(e.value))
        return (isinstance(e, ast.Name) and e.id in self.cfg) or (isinstance(e, ast.Subscript) and self.is_cfg(e.value)
                                                                  and getattr(e.slice, "value", None) in self.c.sections)

    def carries(self, e: ast.AST) -> bool:
        if isinstance(e, (ast.List, ast.Tuple, ast.Set)):
            return any(map(self.carries, e.elts))
        if isinstance(e, ast.Dict):
            return any(self.carries(v) for k, v in zip(e.keys, e.values) if k is None)
        if isinstance(e, (ast.Starred, ast.Lambda)):
            return self.carries(e.value if isinstance(e, ast.Starred) else e.body)
        if isinstance(e, (ast.DictComp, ast.ListComp, ast.SetComp, ast.GeneratorExp)):  # a filtered copy
            return any(self.carries(g.iter) for g in e.generators)
        if isinstance(e, ast.Call):
            name = ann(e.func).rpartition(".")[2]
            if isinstance(e.func, ast.Attribute) and name in ("items", "values", "copy"):
                return self.carries(e.func.value)
            ref = self.c.pkg.resolve(self.m, name) if isinstance(e.func, ast.Name) else None
            return (self.carries(e.func) or (name in COPIES and bool(e.args) and self.carries(e.args[0]))
                    or (ref in self.c.pkg.defs and self.c.typed(self.c.pkg.defs[ref].returns)))
        return self.is_cfg(e)


def callees(pkg: Package, sc: Scope, func: ast.AST, direct: bool) -> tuple[list[Key], ast.AST | None, bool]:
    """The package defs ``func`` may be (called, or handed on), its receiver, and whether ``self`` is bound."""
    if isinstance(func, ast.Name):
        t, ref = sc.types.get(func.id, ""), pkg.resolve(sc.m, func.id)
        if t.startswith("type:"):
            return pkg.methods(t[5:], "__init__"), None, True
        if ref in pkg.defs:
            return [ref], None, False
        return (pkg.methods(ref[1], "__init__")[:1] if ref and direct else []), None, True
    if not isinstance(func, ast.Attribute):
        return [], None, False
    recv, attr, base = func.value, func.attr, ann(func.value)
    if (mod := pkg.imports[sc.m].get(base)) in pkg.mods and (r := pkg.resolve(mod, attr)):
        return ([r], None, False) if r in pkg.defs else (pkg.methods(r[1], "__init__")[:1], None, True)
    if base == "super()" and "self" in sc.types:
        return [k for b in pkg.bases(sc.types["self"]) for k in pkg.methods(b, attr)[:1]], recv, True
    if base in sc.types and not sc.types[base].startswith("type:"):
        return pkg.methods(sc.types[base], attr), recv, True
    return [k for k in pkg.defs if direct and cls_of(k) and k[1].endswith("." + attr)], recv, True


def calls(pkg: Package, sc: Scope):
    """(line, callee, argument nodes by the parameter they bind, receiver) for each package call in a function."""
    for call in (n for n in own_nodes(sc.fn) if isinstance(n, ast.Call)):
        targets, recv, bound = callees(pkg, sc, call.func, True)
        found = [(targets, recv, bound, call.args, call.keywords)]
        extra = [e for k in call.keywords if k.arg == "args" and isinstance(k.value, ast.Tuple) for e in k.value.elts]
        for a in [] if targets else call.args + [k.value for k in call.keywords]:  # partial(f, ...), Thread(target=f)
            found.append((*callees(pkg, sc, a, False), [x for x in call.args if x is not a] + extra,
                          [k for k in call.keywords if k.value is not a and k.arg != "args"]))
        for targets, recv, bound, args, keywords in found:
            for key in targets:
                ps = [a.arg for a in params(pkg.defs[key])][bound and cls_of(key) is not None:]
                by = {ps[i] if i < len(ps) else "*": a for i, a in enumerate(args)}
                yield call.lineno, key, {**by, **{k.arg or "**": k.value for k in keywords}}, recv


def trace(pkg: Package, c: Config) -> list[tuple[Key, Key, int, bool]]:
    """Every followed (callee, caller, call line, is a stop), from job.train_job."""
    start = ("rlsweep.job", "train_job")
    given, edges, queue = {start: {"cfg"}}, {}, [start]
    while queue:
        key = queue.pop()
        sc = Scope(c, pkg.defs[key], given[key], cls_of(key), key[0])
        for line, callee, by, recv in calls(pkg, sc):
            passed = {p for p, a in by.items() if sc.carries(a)}
            if not passed and not any(sc.holder(a) for a in [*by.values(), recv] if a is not None):
                continue
            edge = edges.setdefault((callee, key), [line, False])
            edge[1] |= bool(passed)
            if callee not in given or not passed <= given[callee]:
                given[callee] = given.get(callee, set()) | passed
                queue.append(callee)

    def reads(key: Key) -> bool:  # reads the config off a holder itself
        sc = Scope(c, pkg.defs[key], given[key], cls_of(key), key[0])
        return any(isinstance(n, ast.Attribute) and n.attr in c.attrs and sc.holder(n.value) for n in own_nodes(sc.fn))
    return [(callee, caller, line, passed or reads(callee)) for (callee, caller), (line, passed) in edges.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rev", help="a git revision (default: the working tree)")
    rev = ap.parse_args().rev
    pkg = Package(read_package(rev))
    c = Config(pkg)
    stops, climbs, functions = [], 0, set()
    for callee, caller, line, stop in sorted(trace(pkg, c)):
        if stop:
            climb = pkg.layers[callee[0]] > pkg.layers[caller[0]]
            climbs, functions = climbs + climb, functions | {callee}
            stops.append(f"{callee[0].removeprefix('rlsweep.')}:{callee[1]}:{pkg.defs[callee].lineno} <- "
                         f"{caller[0].removeprefix('rlsweep.')}:{caller[1]}:{line}{' ^' if climb else ''}")
    modules = sorted({s.split(":")[0] for s in stops})
    print(f"rlsweep at {rev or 'the working tree'}: from job.train_job the config stops {len(stops)} times "
          f"({len(functions)} functions) in {len(modules)} modules and climbs back to a higher layer {climbs} times")
    print(f"config classes: {', '.join(sorted(c.types))}; sections: {', '.join(sorted(c.sections))}")
    print(f"holders: {', '.join(sorted(c.holders))} (config attributes {', '.join(sorted(c.attrs))}; holder names "
          f"{', '.join(sorted(c.holder_names))}); import cycles ignored: {len(pkg.cycles)}")
    print(json.dumps({"rev": rev, "stops": len(stops), "functions": len(functions), "climbs": climbs,
                      "modules": {"count": len(modules), "list": modules}, "stop_list": stops}))


if __name__ == "__main__":
    main()
