//! rawq's own control path on the emulated ConnectX: `examples/devinfo` queries the device
//! through libibverbs and `mlx5dv_query_device`, whose answers libmlx5 builds from what the
//! emulated kernel returned (QUERY_DEVICE, EX_QUERY_DEVICE's mlx5 part, QUERY_PORT).
#![cfg(feature = "verbs")]

mod support;

use std::path::Path;
use std::process::Command;

fn devinfo(opts: &[&str]) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = support::example("devinfo");
    let out = Command::new("bash")
        .arg(root.join("scripts/emu.sh"))
        .args(opts)
        .arg("--")
        .arg(exe)
        .current_dir(root)
        .env_remove("LD_PRELOAD")
        .env_remove("RAWQ_EMU_LIB")
        .output()
        .expect("run scripts/emu.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "devinfo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn rawq_devinfo_sees_the_emulated_connectx5() {
    let out = devinfo(&[]);
    assert!(out.starts_with("mlx5_0\n"), "{out}");
    assert!(
        out.contains("firmware 16.35.1012  vendor 0x02c9 part 4119  ports 1"),
        "{out}"
    );
    // mlx5dv_query_device: the capabilities of the device model.
    assert!(
        out.contains("mlx5 DV: yes  min inline 0 (guessed from the PCI id)  eMPW yes  MPW yes  CQE compression up to 64"),
        "{out}"
    );
    assert!(
        out.contains("striding RQ 2^3..2^16 strides of 2^6..2^13 bytes"),
        "{out}"
    );
    assert!(
        out.contains("port 1: active  link layer Ethernet  MTU 1024  MAC 02:fc:00:00:00:01"),
        "{out}"
    );
    assert!(out.contains("flow steering: yes"), "{out}");
    // ibv_query_device_ex through the verbs.h inline wrapper (rdma-sys's own version rejected
    // every 64-bit context, so these read 0 / "no").
    assert!(
        out.contains(
            "RSS on RAW_PACKET: yes (table up to 2048, hash fields 0xff)  TSO up to 262144"
        ),
        "{out}"
    );
}

#[test]
fn rawq_devinfo_sees_the_connectx4_lx_inline_mode() {
    // The L2 inline mode is a ConnectX-4 Lx (part 4117): rawq's DV backend, like DPDK's mlx5
    // PMD without DevX, then inlines the 18-byte L2 header.
    let out = devinfo(&["--min-inline", "l2"]);
    assert!(out.contains("part 4117"), "{out}");
    assert!(out.contains("min inline 18"), "{out}");
}
