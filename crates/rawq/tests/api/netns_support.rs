//! The namespace helper itself: two hosts that can ping each other, and nothing left behind.

use rawq_testkit as support;

#[test]
fn pair_pings_and_cleans_up() {
    let Some(p) = support::NetnsPair::new("sup") else {
        return;
    };
    let out = p.exec(&p.a, &["ping", "-c", "2", "-i", "0.2", "-W", "2", &p.ip_b]);
    assert!(
        out.status.success(),
        "ping failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mac = p.mac(&p.b, &p.veth_b);
    assert_ne!(mac, [0; 6]);
    let name = p.a.clone();
    drop(p);
    let list = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&list.stdout).contains(&name),
        "namespace left behind"
    );
}
