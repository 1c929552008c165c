//! `pktgen --plot FILE.svg` (issue 24 item 4): the file parses as SVG (XML with an `svg` root)
//! and names its axes: a run's latency histogram with its percentiles and its per-second
//! rate; an RFC 2544 test's frame loss and latency over the rate. On the software device
//! (`-b model --txrx`): no root needed. Every run is bounded.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use std::path::{Path, PathBuf};

fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("not XML: {e}"));
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg", "root element");
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg"),
        "SVG namespace"
    );
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.descendants().filter_map(|t| t.text()).collect::<String>())
        .collect()
}

fn has(texts: &[String], want: &str) {
    assert!(
        texts.iter().any(|t| t.contains(want)),
        "no text {want:?} in the SVG's: {texts:?}"
    );
}

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("rawq-plot-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_run_plots_its_latency_histogram_and_rate_per_second() {
    let svg = dir().join("run.svg");
    let out = support::run_example(
        "pktgen",
        &[
            "-b",
            "model",
            "--txrx",
            "--latency",
            "-r",
            "20kpps",
            "-t",
            "2.5",
            "--quiet",
            "--plot",
            svg.to_str().unwrap(),
        ],
        60,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = svg_texts(&svg);
    for want in [
        "latency (ns, logarithmic)",
        "frames",
        "p50",
        "p99",
        "time since start (s)",
        "packets per second",
        "target",
    ] {
        has(&t, want);
    }
    // Issue 32: the plot draws the run's ledger, the same one the text prints.
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("ledger: "))
        .unwrap_or_else(|| panic!("no ledger line in {text}"));
    let offered = line.split_whitespace().nth(1).unwrap();
    has(&t, &format!("Ledger: {offered} frames offered"));
    has(&t, "received back");
    has(&t, "unattributed");
}

#[test]
fn an_rfc2544_test_plots_loss_and_latency_over_the_rate() {
    let svg = dir().join("rfc2544.svg");
    let out = support::run_example(
        "pktgen",
        &[
            "-b",
            "model",
            "--txrx",
            "--rfc2544",
            "loss",
            "--sizes",
            "64,512",
            "--rate-hi",
            "40kpps",
            "--trial",
            "200ms",
            "--quiet",
            "--plot",
            svg.to_str().unwrap(),
        ],
        120,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t = svg_texts(&svg);
    for want in [
        "offered rate (packets per second)",
        "frame loss (%)",
        "round-trip latency",
        "64-byte frames",
        "512-byte frames",
    ] {
        has(&t, want);
    }
}
