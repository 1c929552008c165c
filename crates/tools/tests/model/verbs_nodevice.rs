//! The verbs backend on a machine without an RDMA device must fail cleanly, naming the cause.
//! With `RAWQ_TEST_DEVICE=<name>` set, the same tests assert that the device is listed instead.
#![cfg(feature = "verbs")]

use rawq::describe_devices as describe_all;
use rawq::{Backend, Error, Port};

fn test_device() -> Option<String> {
    std::env::var("RAWQ_TEST_DEVICE")
        .ok()
        .filter(|s| !s.is_empty())
}

fn assert_names_the_cause(e: &Error) {
    let msg = e.to_string();
    match e {
        Error::NoDevice { reason } => {
            assert!(!reason.is_empty(), "NoDevice without a reason: {msg}");
            // The cause is either the errno from ibv_get_device_list or the empty list.
            assert!(
                reason.contains("ibv_get_device_list") || reason.contains("empty"),
                "reason does not name the cause: {msg}"
            );
            assert!(
                msg.contains("Backend::Xdp"),
                "no way forward offered: {msg}"
            );
        }
        Error::NotFound {
            kind, available, ..
        } => {
            assert_eq!(*kind, "RDMA device");
            assert!(!available.is_empty(), "{msg}");
        }
        other => panic!("expected NoDevice or NotFound, got {other:?}: {msg}"),
    }
}

#[test]
fn opening_a_verbs_port_without_a_device_names_the_cause() {
    if let Some(dev) = test_device() {
        let listing = describe_all().expect("a device is present");
        assert!(listing.contains(&dev), "{dev} not in:\n{listing}");
        return;
    }
    let r = Port::builder(Backend::Verbs {
        device: "mlx5_0".into(),
        port: 1,
    })
    .open();
    let e = r.expect_err("there is no RDMA device on this machine");
    assert_names_the_cause(&e);
}

#[test]
fn describe_all_reports_no_device_or_lists_the_test_device() {
    match (describe_all(), test_device()) {
        (Ok(listing), Some(dev)) => {
            assert!(listing.contains(&dev), "{dev} not in:\n{listing}");
            assert!(listing.contains("port 1"), "{listing}");
        }
        (Err(e), Some(dev)) => panic!("RAWQ_TEST_DEVICE={dev} but listing failed: {e}"),
        (Ok(listing), None) => {
            // A device exists although none was named: the listing must name each one.
            assert!(!listing.trim().is_empty());
        }
        (Err(e), None) => {
            assert!(matches!(e, Error::NoDevice { .. }), "{e:?}");
            assert_names_the_cause(&e);
        }
    }
}

#[test]
fn devinfo_example_exits_non_zero_without_a_device() {
    let exe = std::path::Path::new(env!("CARGO_BIN_EXE_rawq-devinfo"));
    if !exe.exists() {
        println!(
            "skipped: {} not built (cargo build -p rawq-tools)",
            exe.display()
        );
        return;
    }
    let out = std::process::Command::new(exe)
        .output()
        .expect("run devinfo");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    match test_device() {
        Some(dev) => {
            assert!(out.status.success(), "devinfo failed: {stderr}");
            assert!(stdout.contains(&dev), "{dev} not in:\n{stdout}");
        }
        None if describe_all().is_err() => {
            assert!(!out.status.success(), "devinfo succeeded with no device");
            assert!(stderr.contains("no RDMA device"), "stderr: {stderr}");
        }
        None => assert!(out.status.success(), "devinfo failed: {stderr}"),
    }
}
