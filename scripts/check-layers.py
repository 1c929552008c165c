#!/usr/bin/env python3
"""Import circles and upward imports between the modules of each crate (issue 30).

Run through scripts/check-layers.sh (which says which crates are enforced); see `--help`.

What it reads. Each crate target (the library's src/lib.rs, each binary's src/main.rs or
src/bin/NAME.rs or src/bin/NAME/main.rs) is a module tree: `mod x;` (with `#[path]`) and inline
`mod x { ... }`. In every module it finds the references to other modules of the same crate:
`use` trees and paths in code starting with `crate::`, `super::`, `self::` or the name of a child
module (`pub(crate)`, `pub(super)` and `pub(in ...)` are visibility, not imports; `$crate` and
macros by name are not followed). A path names the deepest module it walks through; a name a
module only imports (`use a::X;` or `pub use a::X;`) is followed to where it comes from, so
`crate::Error` re-exported from `error` is an import of `error`, not of the crate root.

Test code is left out: `#[cfg(test)]` (or any `cfg(...)` naming `test` outside `not(...)`)
items, any module named `tests`, `#[cfg(test)] mod x;` files, and the crates' tests/, benches/,
examples/ (not read at all). So a circle only test code closes is not a circle here. Other
`cfg`s (features) are all read, as with --all-features.

What it reports, at every level of the tree (the children of one module, each with everything
under it; an import is lifted to the two children of the lowest module holding both ends):
  * circle: a strongly connected component of two or more sibling modules. A parent and its own
    children are not siblings: a parent uses its parts, and a part may use what its parent
    file holds (`super::X`) without making a circle here (that is the module's inside).
  * upward: an import from a module to one in a higher layer of the crate's layer table.
The layer table is the section "## Layer order" of docs/architecture.md: a `### <package>`
heading per crate (for a binary, `### <package> <binary>`), then one numbered item per layer,
lowest first, naming its modules in backticks (`a`, `b` on one line: the same layer; neither
may import the other upward, and a circle between them is still a circle). A nested module's
own order may follow as an item `- in `engine`: `a`, `b` < `c`` (layers lowest first,
separated by `<`; only the modules named are ordered). A top-level module missing from the
table of an enforced crate is an error (so a new module gets a place). An upward import the
table allows is an item `- exception: `a` -> `b`: why` under the crate's heading.

Exit status: 1 if an enforced crate has a circle, an upward import that is not a named
exception, or a module missing from its table; 2 on a usage error; else 0. Report-only crates
are printed, never fail.
"""

import argparse
import os
import re
import sys
from collections import defaultdict

# --------------------------------------------------------------------------------------------
# Lexing: blank comments, strings and char literals (keeping offsets and line numbers).


def blank(text):
    out = list(text)
    i, n = 0, len(text)

    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            wipe(i, j)
            i = j
        elif (c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))
              and re.match(r"b?r#*\"", text[i:i + 260])):
            m = re.match(r"b?r(#*)\"", text[i:])
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            wipe(i, end)
            i = end
        elif c == '"' or (c == "b" and text.startswith('b"', i)
                          and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            wipe(i, j + 1)
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'\n])'", text[i:i + 16])
            if m:
                wipe(i, i + m.end())
                i += m.end()
            else:
                i += 1  # a lifetime
        else:
            i += 1
    return "".join(out)


def match_close(code, i):
    """Index just past the bracket closing the one at code[i]."""
    pairs = {"{": "}", "(": ")", "[": "]"}
    stack = [pairs[code[i]]]
    j = i + 1
    while j < len(code) and stack:
        ch = code[j]
        if ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}":
            stack.pop()
        j += 1
    return j


ATTR = re.compile(r"#!?\[")
CFG_TEST = re.compile(r"\bcfg\s*\((.*)\)", re.S)


def is_test_cfg(attr):
    m = CFG_TEST.search(attr)
    if not m:
        return False
    body = re.sub(r"\bnot\s*\([^()]*(\([^()]*\)[^()]*)*\)", "", m.group(1))
    return re.search(r"\btest\b", body) is not None


def item_end(code, i):
    """End of the item starting at i: its `;` or its outermost `{...}`, whichever comes first."""
    j = i
    while j < len(code):
        ch = code[j]
        if ch == ";":
            return j + 1
        if ch == "{":
            return match_close(code, j)
        if ch in "([":
            j = match_close(code, j)
            continue
        j += 1
    return len(code)


def drop_test_items(code):
    """Blank every item under a cfg(test) attribute; return the new code."""
    out = list(code)
    pos = 0
    while True:
        m = ATTR.search(code, pos)
        if not m:
            break
        end = match_close(code, m.end() - 1)
        attr = code[m.start():end]
        pos = end
        if attr.startswith("#!") or not is_test_cfg(attr):
            continue
        stop = item_end(code, end)
        for k in range(m.start(), stop):
            if out[k] != "\n":
                out[k] = " "
        pos = stop
    return "".join(out)


def line_of(code, i):
    return code.count("\n", 0, i) + 1


# --------------------------------------------------------------------------------------------
# The module tree.


class Module:
    def __init__(self, path, file, parent, span, test=False):
        self.path = path  # tuple of names; () is the crate root
        self.file = file
        self.parent = parent
        self.span = span  # (start, end) in the file's code
        self.children = {}
        self.test = test
        self.imports = {}  # name -> path tuple it imports (from `use`), for re-export following
        self.globs = []  # paths of `use x::*`
        self.refs = []  # (path tuple as written, kind, line)


IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
MOD_DECL = re.compile(r"\bmod\s+(r#)?(" + IDENT + r")\s*([;{])")
INTERNAL_MOD = re.compile(r"\binternal_mod!\s*\(((?:\s*#\[[^\]]*\])*)\s*(" + IDENT + r")\s*,?\s*\)\s*;")
VIS = re.compile(r"\bpub\s*\(\s*(crate|super|self|in\b[^)]*)\)")


class Crate:
    def __init__(self, label, root_file):
        self.label = label
        self.files = {}  # file -> blanked code
        self.errors = []
        self.root = self.load(root_file, (), None, mod_rs=True)

    def code(self, file):
        if file not in self.files:
            with open(file, encoding="utf-8") as f:
                raw = f.read()
            code = VIS.sub(lambda m: " " * len(m.group(0)), drop_test_items(blank(raw)))
            # rawq's `internal_mod!(#[attrs] name)` declares module `name` (crate-private, or
            # public with the `internals` feature): read it as `#[attrs] mod name;`, same length.
            self.files[file] = INTERNAL_MOD.sub(
                lambda m: (m.group(1) + " mod " + m.group(2) + ";").ljust(len(m.group(0))), code)
        return self.files[file]

    def load(self, file, path, parent, mod_rs, test=False):
        code = self.code(file)
        m = Module(path, file, parent, (0, len(code)), test)
        self.scan(m, code, 0, len(code), os.path.dirname(file), mod_rs)
        return m

    def scan(self, m, code, start, end, fdir, mod_rs, inline_dir=None):
        """Find the child modules of m in code[start:end]."""
        pos = start
        # directory the children's files live in
        if inline_dir is not None:
            cdir = inline_dir
        elif mod_rs:
            cdir = fdir
        else:
            cdir = os.path.join(fdir, os.path.splitext(os.path.basename(m.file))[0])
        while True:
            d = MOD_DECL.search(code, pos, end)
            if not d:
                break
            name = d.group(2)
            # attributes written just before: the text back to the previous item end
            back = max(code.rfind(";", start, d.start()), code.rfind("}", start, d.start()),
                       code.rfind("{", start, d.start()), start)
            # (in the code, cfg(test) items are gone and strings blanked: the path's string is
            # read from the raw text at the same place)
            attrs = code[back:d.start()]
            pm = re.search(r"#\[\s*path\s*=", attrs)
            if pm:
                raw = self.raw_text(m.file)[back + pm.end():d.start()]
                pm = re.match(r"\s*\"([^\"]+)\"", raw)
            test = m.test or name == "tests" or is_test_cfg(attrs)
            if d.group(3) == ";":
                if pm:
                    f = os.path.normpath(os.path.join(fdir if inline_dir is None else cdir,
                                                      pm.group(1)))
                    child_mod_rs = True  # a #[path] file's children sit beside it
                    # (the reference: like a mod.rs); good enough for our trees
                else:
                    f1 = os.path.join(cdir, name + ".rs")
                    f2 = os.path.join(cdir, name, "mod.rs")
                    f = f1 if os.path.exists(f1) else f2
                    child_mod_rs = f == f2
                if not os.path.exists(f):
                    if not test:
                        self.errors.append(f"{m.file}:{line_of(code, d.start())}: "
                                           f"no file for `mod {name};`")
                    pos = d.end()
                    continue
                if test:
                    c = Module(m.path + (name,), f, m, (0, 0), True)
                else:
                    c = self.load(f, m.path + (name,), m, child_mod_rs, test)
                m.children[name] = c
                pos = d.end()
            else:
                close = match_close(code, d.end() - 1)
                c = Module(m.path + (name,), m.file, m, (d.end(), close - 1), test)
                m.children[name] = c
                if not test:
                    self.scan(c, code, d.end(), close - 1, fdir, mod_rs,
                              inline_dir=os.path.join(cdir, name))
                pos = close
        return m

    _raw = {}

    def raw_text(self, file):
        # the attributes (#[path]) are wiped with strings by blank(); read them from the raw text
        if file not in self._raw:
            with open(file, encoding="utf-8") as f:
                self._raw[file] = f.read()
        return self._raw[file]

    def modules(self, m=None):
        m = m or self.root
        yield m
        for c in m.children.values():
            yield from self.modules(c)


# --------------------------------------------------------------------------------------------
# References.

USE = re.compile(r"\buse\s+")
PATH_START = re.compile(r"(?<![\w$:.])(crate|super|self|" + IDENT + r")\s*::")


def parse_use_tree(s):
    """`a::{b, c::d as e, f::*}` -> [(segments, alias)]."""
    s = s.strip()
    out = []

    def split_top(t):
        parts, depth, cur = [], 0, ""
        for ch in t:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        return [p.strip() for p in parts if p.strip()]

    def walk(prefix, t):
        t = t.strip()
        if t.startswith("::"):
            t = t[2:]
        i = t.find("{")
        if i >= 0 and t.endswith("}"):
            head = [x.strip() for x in t[:i].split("::") if x.strip()]
            for p in split_top(t[i + 1:-1]):
                walk(prefix + head, p)
            return
        alias = None
        am = re.match(r"(.*?)\s+as\s+(" + IDENT + r")$", t, re.S)
        if am:
            t, alias = am.group(1), am.group(2)
        segs = [x.strip() for x in t.split("::") if x.strip()]
        out.append((prefix + segs, alias))

    walk([], s)
    return out


def own_spans(m):
    """The parts of m's code that are m's own (not its inline children's)."""
    spans, pos = [], m.span[0]
    for c in sorted((c for c in m.children.values() if c.file == m.file and c.span[1] > c.span[0]),
                    key=lambda c: c.span[0]):
        spans.append((pos, c.span[0]))
        pos = c.span[1]
    spans.append((pos, m.span[1]))
    return spans


def collect(crate):
    for m in crate.modules():
        if m.test or m.span[1] <= m.span[0] and m.path:
            continue
        code = crate.code(m.file)
        for a, b in own_spans(m):
            seg = code[a:b]
            used = []
            for u in USE.finditer(seg):
                end = seg.find(";", u.end())
                if end < 0:
                    continue
                tree = seg[u.end():end]
                line = line_of(code, a + u.start())
                used.append((u.start(), end))
                for segs, alias in parse_use_tree(tree):
                    if not segs:
                        continue
                    if segs[-1] == "*":
                        m.globs.append(tuple(segs[:-1]))
                        m.refs.append((tuple(segs[:-1]), "use", line))
                        continue
                    if segs[-1] == "self":
                        segs = segs[:-1]
                    name = alias or segs[-1]
                    if name != "_":
                        m.imports[name] = tuple(segs)
                    m.refs.append((tuple(segs), "use", line))
            for p in PATH_START.finditer(seg):
                if any(s <= p.start() < e for s, e in used):
                    continue
                j = p.start()
                k = j
                segs = []
                while True:
                    q = re.match(r"\s*(r#)?(" + IDENT + r")\s*(::)?", seg[k:])
                    if not q:
                        break
                    segs.append(q.group(2))
                    k += q.end()
                    if not q.group(3):
                        break
                    if seg[k:].lstrip().startswith("<"):
                        break
                m.refs.append((tuple(segs), "path", line_of(code, a + j)))


def resolve(crate, m, segs, depth=0):
    """The module a path written in m points into, or None (outside the crate)."""
    if depth > 16 or not segs:
        return None
    first, rest = segs[0], list(segs[1:])
    if first == "crate":
        cur = crate.root
    elif first in ("super", "self"):
        cur = m
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                cur = cur.parent
                if cur is None:
                    return None
            segs = segs[1:]
        rest = list(segs)
    elif first in m.children:
        cur = m
        rest = list(segs)
    elif first in m.imports and m.imports[first][0] != first:
        t = resolve(crate, m, m.imports[first], depth + 1)
        if t is None:
            return None
        return walk(crate, t, rest, depth)
    else:
        return None
    return walk(crate, cur, rest, depth)


def walk(crate, cur, rest, depth):
    while rest:
        name = rest[0]
        if name in cur.children and not cur.children[name].test:
            cur = cur.children[name]
            rest = rest[1:]
            continue
        if name in cur.children:
            return None  # into test code
        if name in cur.imports and depth < 16:
            t = resolve(crate, cur, cur.imports[name], depth + 1)
            if t is not None:
                return walk(crate, t, rest[1:], depth + 1) if len(rest) > 1 else t
        for g in cur.globs:
            t = resolve(crate, cur, g, depth + 1)
            if t is not None and t is not cur and (name in t.children or name in t.imports):
                return walk(crate, t, rest, depth + 1)
        break
    return cur


# --------------------------------------------------------------------------------------------
# Graph.


def edges(crate):
    """(src module, dst module, file, line), test code and self-references left out."""
    out = []
    for m in crate.modules():
        if m.test:
            continue
        for segs, kind, line in m.refs:
            t = resolve(crate, m, list(segs))
            if t is None or t is m or t.test:
                continue
            out.append((m, t, m.file, line))
    return out


def lift(src, dst):
    """(level path, child of level holding src, child holding dst), or None if one holds the
    other."""
    a, b = src.path, dst.path
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    if k == len(a) or k == len(b):
        return None
    return a[:k], a[k], b[k]


def sccs(nodes, adj):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(adj.get(v, ())):
            if w not in index:
                strong(w)
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            strong(v)
    return out


# --------------------------------------------------------------------------------------------
# Layer tables.


def read_layers(doc):
    """{crate label: {"order": {level path: {module: layer}}, "exceptions": {(a, b)}}}."""
    tables = {}
    if not doc or not os.path.exists(doc):
        return tables
    with open(doc, encoding="utf-8") as f:
        lines = f.read().splitlines()
    inside, cur = False, None
    for ln in lines:
        if ln.startswith("## "):
            inside = ln.strip() == "## Layer order"
            cur = None
            continue
        if not inside:
            continue
        if ln.startswith("### "):
            label = ln[4:].strip().strip("`")
            cur = tables.setdefault(label, {"order": defaultdict(dict), "exceptions": set()})
            continue
        if cur is None:
            continue
        s = ln.strip()
        ex = re.match(r"[-*]?\s*exception:\s*`([\w:]+)`\s*->\s*`([\w:]+)`", s)
        if ex:
            cur["exceptions"].add((ex.group(1), ex.group(2)))
            continue
        nested = re.match(r"[-*]\s*in\s*`([\w:]+)`\s*:\s*(.*)", s)
        if nested:
            level = tuple(nested.group(1).split("::"))
            # `a` < `b`, `c` < `d`: layers separated by '<', lowest first
            for i, part in enumerate(nested.group(2).split("<")):
                for name in re.findall(r"`(\w+)`", part):
                    cur["order"][level][name] = i
            continue
        item = re.match(r"(\d+)\.\s+((?:`\w+`\s*,?\s*)+)", s)
        if item:
            for name in re.findall(r"`(\w+)`", item.group(2)):
                cur["order"][()][name] = int(item.group(1))
    return tables


# --------------------------------------------------------------------------------------------


def crate_targets(crate_dir):
    """[(label, root file)] for a package directory."""
    name = os.path.basename(os.path.normpath(crate_dir))
    cargo = os.path.join(crate_dir, "Cargo.toml")
    if os.path.exists(cargo):
        with open(cargo, encoding="utf-8") as f:
            m = re.search(r"^\s*name\s*=\s*\"([^\"]+)\"", f.read(), re.M)
            if m:
                name = m.group(1)
    out = []
    src = os.path.join(crate_dir, "src")
    if os.path.exists(os.path.join(src, "lib.rs")):
        out.append((name, os.path.join(src, "lib.rs")))
    if os.path.exists(os.path.join(src, "main.rs")):
        out.append((name + " " + name, os.path.join(src, "main.rs")))
    bdir = os.path.join(src, "bin")
    if os.path.isdir(bdir):
        for e in sorted(os.listdir(bdir)):
            p = os.path.join(bdir, e)
            if e.endswith(".rs"):
                out.append((name + " " + e[:-3], p))
            elif os.path.exists(os.path.join(p, "main.rs")):
                out.append((name + " " + e, os.path.join(p, "main.rs")))
    return out


def modname(level, child):
    return "::".join(level + (child,))


def check_target(label, root, tables, enforce, root_dir, out, graph=False):
    crate = Crate(label, root)
    collect(crate)
    rel = lambda f: os.path.relpath(f, root_dir)  # noqa: E731
    found = []  # (kind, text) -- every problem
    by_level = defaultdict(lambda: defaultdict(list))  # level -> (a, b) -> [(file, line)]
    for src, dst, f, line in edges(crate):
        lv = lift(src, dst)
        if lv is None:
            continue
        level, a, b = lv
        by_level[level][(a, b)].append((rel(f), line))
    for e in crate.errors:
        found.append(("error", e))
    if graph:
        for level in sorted(by_level):
            for a, b in sorted(by_level[level]):
                out.append(f"  edge {modname(level, a)} -> {modname(level, b)}")
    # circles
    for level in sorted(by_level):
        pairs = by_level[level]
        adj = defaultdict(set)
        nodes = set()
        for a, b in pairs:
            adj[a].add(b)
            nodes |= {a, b}
        for comp in sccs(nodes, adj):
            if len(comp) < 2:
                continue
            cs = set(comp)
            where = "crate root" if not level else "::".join(level)
            text = [f"circle in {where}: " + ", ".join(comp)]
            for (a, b), sites in sorted(pairs.items()):
                if a in cs and b in cs:
                    s = ", ".join(f"{f}:{ln}" for f, ln in sorted(set(sites))[:6])
                    more = len(set(sites)) - 6
                    text.append(f"    {modname(level, a)} -> {modname(level, b)}  ({s}"
                                + (f", +{more} more" if more > 0 else "") + ")")
            found.append(("circle", "\n".join(text)))
    # layers
    table = tables.get(label)
    top = [n for n, c in crate.root.children.items() if not c.test]
    if table is None and not top:
        pass  # a single-file target: nothing to order
    elif table is None:
        found.append(("table", f"no layer table for `{label}` in the \"## Layer order\" section"))
    else:
        order = table["order"]
        missing = [n for n in sorted(top) if n not in order.get((), {})]
        if missing:
            found.append(("table", f"modules of `{label}` not in its layer table: "
                          + ", ".join(missing)))
        listed = [n for n in order.get((), {}) if n not in crate.root.children]
        if listed:
            found.append(("table", f"layer table of `{label}` names modules it does not have: "
                          + ", ".join(listed)))
        for level, pairs in sorted(by_level.items()):
            lorder = order.get(level)
            if not lorder:
                continue
            for (a, b), sites in sorted(pairs.items()):
                if a in lorder and b in lorder and lorder[a] < lorder[b]:
                    key = (modname(level, a), modname(level, b))
                    s = ", ".join(f"{f}:{ln}" for f, ln in sorted(set(sites)))
                    if key in table["exceptions"]:
                        out.append(f"  (named exception) {key[0]} -> {key[1]}")
                        continue
                    found.append(("upward", f"upward: {key[0]} (layer {lorder[a]}) imports "
                                  f"{key[1]} (layer {lorder[b]})  ({s})"))
    mode = "enforced" if enforce else "report only"
    n_circ = sum(1 for k, _ in found if k == "circle")
    n_up = sum(1 for k, _ in found if k == "upward")
    out.append(f"{label} ({rel(root)}, {mode}): {n_circ} circle(s), {n_up} upward import(s)"
               + ("" if table is not None or not top else ", no layer table"))
    for _, t in found:
        out.append("  " + t.replace("\n", "\n  "))
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."),
                    help="workspace root (default: this script's parent directory)")
    ap.add_argument("--doc", default=None,
                    help="the file holding \"## Layer order\" (default: ROOT/docs/architecture.md)")
    ap.add_argument("--enforce", default="",
                    help="comma-separated packages whose circles and upward imports fail the run")
    ap.add_argument("--report", default="",
                    help="comma-separated packages only reported")
    ap.add_argument("--graph", action="store_true",
                    help="also print every import between sibling modules (to draw a table)")
    args = ap.parse_args(argv)
    root_dir = os.path.abspath(args.root)
    doc = args.doc or os.path.join(root_dir, "docs", "architecture.md")
    tables = read_layers(doc)
    enforce = [c for c in args.enforce.split(",") if c]
    report = [c for c in args.report.split(",") if c and c not in enforce]
    if not enforce and not report:
        ap.error("name at least one package with --enforce or --report")
    dirs = {}
    cdir = os.path.join(root_dir, "crates")
    for e in sorted(os.listdir(cdir)) if os.path.isdir(cdir) else []:
        for label, _ in crate_targets(os.path.join(cdir, e))[:1]:
            dirs[label.split(" ")[0]] = os.path.join(cdir, e)
    failed = False
    out = []
    for pkg in enforce + report:
        if pkg not in dirs:
            print(f"check-layers: no package `{pkg}` under {cdir}", file=sys.stderr)
            return 2
        for label, rootf in crate_targets(dirs[pkg]):
            found = check_target(label, rootf, tables, pkg in enforce, root_dir, out,
                                 args.graph)
            if pkg in enforce and found:
                failed = True
    print("\n".join(out))
    if failed:
        print("check-layers: FAILED (an enforced crate has a circle, an upward import or a gap "
              "in its layer table; the layer tables are in docs/architecture.md, "
              "\"## Layer order\")", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
