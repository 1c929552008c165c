//! `--generate`: each tool's man page and shell completions come from the clap definitions that
//! parse its options (issue 31 item 4), named as the installed binary.

use rawq_testkit as support;

fn generated(bin: &str, kind: &str) -> String {
    let out = support::run_example(bin, &["--generate", kind], 10);
    assert!(
        out.status.success(),
        "{bin} --generate {kind}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn man_pages_and_completions_name_each_tools_options() {
    // (tool, an option only that tool has)
    for (bin, option) in [
        ("pktgen", "rfc2544"),
        ("fwd", "rx-mode"),
        ("devinfo", "generate"),
    ] {
        let name = format!("rawq-{bin}");
        let man = generated(bin, "man");
        assert!(
            man.starts_with(".ie") || man.contains(".TH"),
            "{name}: {man}"
        );
        assert!(
            man.contains(&format!(".TH {name}")),
            "{name}'s man page: {man}"
        );
        // roff escapes the dashes of an option (\-\-rx\-mode).
        assert!(
            man.contains(&format!("\\-\\-{}", option.replace('-', "\\-"))),
            "{name}'s man page lacks --{option}"
        );
        let bash = generated(bin, "complete-bash");
        assert!(
            bash.contains(&format!("--{option}")),
            "{name}'s bash completion: {bash}"
        );
        assert!(
            bash.contains(&name),
            "{name}'s bash completion names another binary: {bash}"
        );
        for kind in ["complete-zsh", "complete-fish", "complete-elvish"] {
            let s = generated(bin, kind);
            assert!(s.contains(option), "{name} {kind}: {s}");
        }
    }
}

#[test]
fn generate_is_refused_beside_other_options_or_with_an_unknown_kind() {
    for args in [
        &["--generate", "man", "-b", "model"][..],
        &["--generate", "troff"][..],
    ] {
        let out = support::run_example("pktgen", args, 10);
        assert_eq!(out.status.code(), Some(2), "pktgen {args:?}");
        assert!(out.stdout.is_empty(), "pktgen {args:?} wrote to stdout");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--generate"), "pktgen {args:?}: {err}");
    }
}
