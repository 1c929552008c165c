#!/usr/bin/env python3
"""Tests of scripts/check-layers.py: it must find the circles and upward imports planted in
small fixture workspaces (written to a temporary directory), and only those.

Run by scripts/check-layers.sh before the real check; alone: python3 scripts/check-layers-test.py
"""

import atexit
import contextlib
import importlib.util
import io
import os
import shutil
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_layers", os.path.join(HERE, "check-layers.py"))
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)


def workspace(files, doc=""):
    """A workspace with package `fix` (crates/fix) holding `files` ({path under src: text})
    and docs/architecture.md holding `doc`."""
    root = tempfile.mkdtemp(prefix="check-layers-")
    atexit.register(shutil.rmtree, root, True)
    paths = dict(files)
    paths["../Cargo.toml"] = '[package]\nname = "fix"\nversion = "0.1.0"\n'
    for rel, text in paths.items():
        p = os.path.normpath(os.path.join(root, "crates", "fix", "src", rel))
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(text))
    os.makedirs(os.path.join(root, "docs"))
    with open(os.path.join(root, "docs", "architecture.md"), "w", encoding="utf-8") as f:
        f.write("# Architecture\n\n## Layer order\n\n" + textwrap.dedent(doc))
    return root


def run(root, mode="--enforce"):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = check_layers.main(["--root", root, mode, "fix"])
    return rc, out.getvalue()


TABLE_ABC = """\
### fix

1. `c`
2. `b`
3. `a`
"""

# Modules a -> b -> c, and c -> a closes the circle a -> b -> c -> a.
CIRCLE_ABC = {
    "a.rs": "use crate::b::B;\npub struct A;\n",
    "b.rs": "pub struct B;\npub fn f() -> crate::c::C { crate::c::C }\n",
    "c.rs": "use super::a::A;\npub struct C;\npub fn g(_: A) {}\n",
}


def assert_circle_abc(test, root):
    rc, out = run(root)
    test.assertEqual(rc, 1, out)
    test.assertIn("circle in crate root: a, b, c", out)
    test.assertIn("c -> a  (crates/fix/src/c.rs:1)", out)
    return out


class Circles(unittest.TestCase):
    def test_finds_a_planted_circle(self):
        root = workspace({"lib.rs": "mod a;\nmod b;\nmod c;\n", **CIRCLE_ABC}, TABLE_ABC)
        out = assert_circle_abc(self, root)
        self.assertIn("upward: c (layer 1) imports a (layer 3)", out)

    def test_no_circle_without_the_planted_import(self):
        root = workspace({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\npub fn f() -> crate::c::C { crate::c::C }\n",
            "c.rs": "pub struct C;\n",
        }, TABLE_ABC)
        rc, out = run(root)
        self.assertEqual(rc, 0, out)
        self.assertIn("0 circle(s), 0 upward import(s)", out)

    def test_report_only_does_not_fail(self):
        root = workspace({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "use crate::a::A;\npub struct B;\n",
        })
        rc, out = run(root, "--report")
        self.assertEqual(rc, 0, out)
        self.assertIn("circle in crate root: a, b", out)
        self.assertIn("report only", out)

    def test_circle_through_a_reexport(self):
        # `crate::Error` is error's, re-exported by the root: a circle a <-> error
        root = workspace({
            "lib.rs": "mod a;\nmod error;\npub use error::Error;\n",
            "a.rs": "pub struct A;\npub fn f() -> crate::Error { todo!() }\n",
            "error.rs": "use crate::a::A;\npub struct Error(A);\n",
        })
        rc, out = run(root, "--report")
        self.assertIn("circle in crate root: a, error", out)

    def test_circle_inside_a_directory_module(self):
        root = workspace({
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod x;\nmod y;\npub use x::X;\n",
            "m/x.rs": "pub struct X;\npub fn f(_: super::y::Y) {}\n",
            "m/y.rs": "use super::x;\npub struct Y(x::X);\n",
        }, "### fix\n\n1. `m`\n")
        rc, out = run(root)
        self.assertEqual(rc, 1, out)
        self.assertIn("circle in m: x, y", out)

    def test_use_groups_and_inline_modules(self):
        root = workspace({
            "lib.rs": "mod a;\nmod b;\nmod c;\n",
            "a.rs": "use crate::{b::{self, B}, c::C};\npub struct A;\n",
            "b.rs": "pub struct B;\n",
            "c.rs": "pub struct C;\npub mod inner {\n    pub fn f() { crate::a::A; }\n}\n",
        })
        rc, out = run(root, "--report")
        self.assertIn("circle in crate root: a, c", out)
        self.assertNotIn("a, b", out)


class LeftOut(unittest.TestCase):
    def test_test_code_comments_and_strings_make_no_circle(self):
        root = workspace({
            "lib.rs": "mod a;\nmod b;\n#[cfg(test)]\nmod tests_dir;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": textwrap.dedent("""\
                // use crate::a::A;  (a comment)
                /* crate::a::A in a /* nested */ block comment */
                pub struct B;
                pub const S: &str = "crate::a::A";
                pub const R: &str = r#"super::a::A"#;
                pub const C: char = '"';
                #[cfg(test)]
                use crate::a::A;
                #[cfg(all(test, feature = "x"))]
                fn only_in_tests() { let _ = crate::a::A; }
                #[cfg(test)]
                mod tests {
                    use super::super::a::A;
                }
                """),
            "tests_dir.rs": "use crate::a::A;\nuse crate::b::B;\n",
        }, "### fix\n\n1. `b`\n2. `a`\n")
        rc, out = run(root)
        self.assertEqual(rc, 0, out)

    def test_a_module_after_a_test_module_counts(self):
        root = workspace({
            "lib.rs": textwrap.dedent("""\
                mod a;
                #[cfg(test)]
                #[path = "../shared/helpers.rs"]
                pub(crate) mod helpers;
                mod b;
                #[path = "elsewhere/c_file.rs"]
                mod c;
                """),
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B(crate::c::C);\n",
            "elsewhere/c_file.rs": "pub struct C;\npub fn f(_: crate::a::A) {}\n",
        })
        rc, out = run(root, "--report")
        self.assertIn("circle in crate root: a, b, c", out)
        self.assertIn("c -> a  (crates/fix/src/elsewhere/c_file.rs:2)", out)

    def test_not_test_is_not_test_code(self):
        root = workspace({
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b::B;\npub struct A;\n",
            "b.rs": "pub struct B;\n#[cfg(not(test))]\nuse crate::a::A;\n",
        })
        rc, out = run(root, "--report")
        self.assertIn("circle in crate root: a, b", out)

    def test_a_parent_and_its_children_are_not_a_circle(self):
        root = workspace({
            "lib.rs": "mod m;\npub use m::x::X;\n",
            "m/mod.rs": "pub mod x;\npub struct Shared;\npub use x::X;\n",
            "m/x.rs": "use super::Shared;\npub struct X(Shared);\n",
        }, "### fix\n\n1. `m`\n")
        rc, out = run(root)
        self.assertEqual(rc, 0, out)


class InternalMod(unittest.TestCase):
    """rawq declares its backends' internals with `internal_mod!(name)` (crates/rawq/src/lib.rs:
    `pub mod` with the feature `internals`, `pub(crate) mod` without): the checker reads it as
    `mod name;`, attributes and all, so those modules are checked like any other. Each test
    fails if the checker stops reading it (the modules it declares would vanish)."""

    # The macro as rawq defines it (its own `mod $name;` must not be read as a module).
    MACRO = """\
        macro_rules! internal_mod {
            ($(#[$a:meta])* $name:ident) => {
                $(#[$a])*
                #[cfg(feature = "internals")]
                #[doc(hidden)]
                pub mod $name;
                $(#[$a])*
                #[cfg(not(feature = "internals"))]
                pub(crate) mod $name;
            };
        }
        """

    def test_a_circle_through_internal_modules_is_found(self):
        root = workspace({
            "lib.rs": self.MACRO + textwrap.dedent("""\
                mod a;
                internal_mod!(b);
                internal_mod!(
                    /// The third, with attributes, as dv declares its rings.
                    #[cfg(feature = "x")]
                    #[allow(unsafe_code)]
                    c
                );
                """),
            **CIRCLE_ABC,
        }, TABLE_ABC)
        out = assert_circle_abc(self, root)
        self.assertNotIn("$name", out)

    def test_an_internal_module_inside_a_directory_module_is_in_its_order(self):
        files = {
            "lib.rs": self.MACRO + "mod m;\n",
            "m/mod.rs": "internal_mod!(p);\ninternal_mod!(#[cfg(feature = \"x\")] q);\n",
            "m/p.rs": "pub fn f() { super::q::g() }\n",
            "m/q.rs": "pub fn g() {}\n",
        }
        rc, out = run(workspace(files, "### fix\n\n1. `m`\n\n- in `m`: `p` < `q`\n"))
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: m::p (layer 0) imports m::q (layer 1)", out)

    def test_an_internal_module_missing_from_the_table_fails(self):
        files = {
            "lib.rs": self.MACRO + "mod high;\ninternal_mod!(low);\n",
            "low.rs": "pub fn f() {}\n",
            "high.rs": "pub fn g() { crate::low::f() }\n",
        }
        rc, out = run(workspace(files, "### fix\n\n1. `high`\n"))
        self.assertEqual(rc, 1, out)
        self.assertIn("not in its layer table: low", out)


class Table(unittest.TestCase):
    FILES = {
        "lib.rs": "mod low;\nmod high;\n",
        "low.rs": "pub fn f() { crate::high::g() }\n",
        "high.rs": "pub fn g() {}\n",
    }

    def test_upward_import_fails(self):
        rc, out = run(workspace(self.FILES, "### fix\n\n1. `low`\n2. `high`\n"))
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: low (layer 1) imports high (layer 2)  (crates/fix/src/low.rs:1)",
                      out)

    def test_named_exception_passes(self):
        doc = "### fix\n\n1. `low`\n2. `high`\n\n- exception: `low` -> `high`: a reason\n"
        rc, out = run(workspace(self.FILES, doc))
        self.assertEqual(rc, 0, out)

    def test_same_layer_passes(self):
        rc, out = run(workspace(self.FILES, "### fix\n\n1. `low`, `high`\n"))
        self.assertEqual(rc, 0, out)

    def test_unlisted_module_fails(self):
        rc, out = run(workspace(self.FILES, "### fix\n\n1. `high`\n"))
        self.assertEqual(rc, 1, out)
        self.assertIn("not in its layer table: low", out)

    def test_missing_table_fails(self):
        rc, out = run(workspace(self.FILES, ""))
        self.assertEqual(rc, 1, out)
        self.assertIn("no layer table for `fix`", out)

    def test_nested_order(self):
        files = {
            "lib.rs": "mod m;\n",
            "m/mod.rs": "mod p;\nmod q;\n",
            "m/p.rs": "pub fn f() { super::q::g() }\n",
            "m/q.rs": "pub fn g() {}\n",
        }
        rc, out = run(workspace(files, "### fix\n\n1. `m`\n\n- in `m`: `p` < `q`\n"))
        self.assertEqual(rc, 1, out)
        self.assertIn("upward: m::p (layer 0) imports m::q (layer 1)", out)


if __name__ == "__main__":
    unittest.main()
