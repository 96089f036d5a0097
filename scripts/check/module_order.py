#!/usr/bin/env python3
"""Import circles between a crate's top-level modules. For every crate of the workspace, each
top-level module (`src/x.rs`, `src/x/…`) uses the modules it names through `crate::` (and
`super::` from a top-level file); a module that reaches itself through such uses is in a
circle, and a reader can no longer tell which module is below which. Prints every circle
(strongly connected component) found. Usage: module_order.py ROOT [--known FILE]: with
`--known`, circles listed in FILE (one per line, modules sorted and joined by ` `, prefixed by
the crate's directory and `: `) are reported but do not fail; any other circle fails, and so does a
listed one that is gone (so the list only shrinks)."""
import os
import re
import subprocess
import sys

root = sys.argv[1]
known_file = sys.argv[sys.argv.index("--known") + 1] if "--known" in sys.argv else None
files = subprocess.run(["git", "-C", root, "ls-files", "*.rs"], capture_output=True, text=True).stdout.split()

crates = sorted({f.split("/src/")[0] for f in files if "/src/" in f and not f.startswith("fuzz/")} | ({"fuzz"} if any(f.startswith("fuzz/src/") for f in files) else set()))


def strip_comments(text):
    text = re.sub(r"(?m)//.*$", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def strongly_connected(graph):
    """Tarjan: the components of more than one module, each sorted."""
    nodes = set(graph) | {w for ws in graph.values() for w in ws}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def module_path(rel):
    """`a.rs` → (a,), `a/mod.rs` → (a,), `a/b.rs` → (a, b), `lib.rs` → ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return tuple(parts)


def targets(text, here):
    """Module paths a file's code names: `crate::a::b`, `super::x`, `self::x` (resolved from
    the file's module `here`), including the members of `use crate::{a, b::c}` groups."""
    out = []
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)(?:::\{([^;]*?)\})?", text, flags=re.S):
        base = {"crate": (), "super": here[:-1], "self": here}[m.group(1)]
        path = base + tuple(x for x in m.group(2).split("::") if x)
        out.append(path)
        for item in split_group(m.group(3) or ""):
            out.append(path + (item,))
    for m in re.finditer(r"\b(crate|super|self)::\{([^;]*?)\}\s*;", text, flags=re.S):
        base = {"crate": (), "super": here[:-1], "self": here}[m.group(1)]
        for item in split_group(m.group(2)):
            out.append(base + (item,))
    return out


def split_group(group):
    items, depth, item = [], 0, ""
    for ch in group + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            m = re.match(r"\s*(\w+)", item)
            if m:
                items.append(m.group(1))
            item = ""
        else:
            item += ch
    return items


MOD_LINE = re.compile(r"^\s*(?:pub(?:\([\w:]+\))? )?mod (\w+);")


def scope_file(src, scope):
    """The file that declares `scope`'s child modules."""
    if not scope:
        for name in ("lib.rs", "main.rs"):
            if f"{src}{name}" in files:
                return f"{src}{name}"
        return None
    d = src + "/".join(scope)
    for f in (f"{d}/mod.rs", f"{d}.rs"):
        if f in files:
            return f
    return None


def topological(names, graph):
    """`names` bottom-up (a module after everything it uses), alphabetical where free."""
    done, out = set(), []
    while len(out) < len(names):
        ready = sorted(n for n in names if n not in done and graph.get(n, set()) & set(names) <= done)
        if not ready:
            return None
        done.add(ready[0])
        out.append(ready[0])
    return out


def check_order(crate, src, scope, graph):
    """The child modules are declared bottom-up: each after every sibling it uses. With
    `--fix`, a block of declarations out of order is rewritten in that order."""
    f = scope_file(src, scope)
    if f is None:
        return
    lines = open(os.path.join(root, f)).read().split("\n")
    decl = [(i, m.group(1)) for i, l in enumerate(lines) if (m := MOD_LINE.match(l))]
    pos = {name: i for i, name in decl}
    late = [(a, b) for a, uses in graph.items() for b in uses if a in pos and b in pos and pos[b] > pos[a]]
    if not late:
        return
    if "--fix" in sys.argv:
        # Each declaration with the attribute and doc lines right above it.
        first = decl[0][0]
        while first > 0 and lines[first - 1].lstrip().startswith(("#[", "///")):
            first -= 1
        chunks, start = {}, first
        for i, name in decl:
            chunks[name] = lines[start : i + 1]
            start = i + 1
        block = lines[first : decl[-1][0] + 1]
        if sum(len(c) for c in chunks.values()) == len(block):
            order = topological([n for _, n in decl], graph)
            if order:
                new = [l for n in order for l in chunks[n]]
                lines[first : decl[-1][0] + 1] = new
                open(os.path.join(root, f), "w").write("\n".join(lines))
                print(f"reordered the modules of {f}")
                return
    for a, b in sorted(late):
        misordered.append(f"{f}: `mod {a}` uses `{b}`, declared after it (declare modules bottom-up)")


circles = []
misordered = []
for crate in crates:
    src = f"{crate}/src/"
    mine = [f for f in files if f.startswith(src) and not f[len(src):].startswith("bin/")]
    paths = {f: module_path(f[len(src):]) for f in mine}
    known_modules = set(paths.values())
    # edges[scope][a] = siblings (children of `scope`) that child `a` of `scope` uses.
    edges = {}
    for f, here in paths.items():
        text = strip_comments(open(os.path.join(root, f)).read())
        text = text.split("#[cfg(test)]")[0]  # unit tests (at the end) may use anything
        for t in targets(text, here):
            # Only the part of the path that names modules.
            while t and t not in known_modules:
                t = t[:-1]
            c = 0
            while c < len(here) and c < len(t) and here[c] == t[c]:
                c += 1
            if c < len(here) and c < len(t):  # siblings under here[:c]
                edges.setdefault(here[:c], {}).setdefault(here[c], set()).add(t[c])
    for scope, graph in sorted(edges.items()):
        where = "::".join(scope)
        comps = strongly_connected(graph)
        for comp in comps:
            circles.append(f"{crate}{' ' + where if where else ''}: {' '.join(comp)}")
        if not comps:
            check_order(crate, src, scope, graph)

known = set()
if known_file:
    known = {l.strip() for l in open(known_file) if l.strip() and not l.startswith("#")}
found = set(circles)
new = sorted(found - known)
gone = sorted(known - found)
for c in sorted(found & known):
    print(f"known circle: {c}")
for c in new:
    print(f"NEW circle: {c}")
for c in gone:
    print(f"gone (remove it from {known_file}): {c}")
for m in misordered:
    print(m)
print(f"{len(found)} circles ({len(new)} new, {len(gone)} listed but gone), {len(misordered)} modules declared out of order", file=sys.stderr)
sys.exit(1 if new or gone or misordered else 0)

