//! Feature `serde`: the stats, info and counter types as JSON (the field names are the keys,
//! offload places lowercase words), and back where a type can be read.
#![cfg(feature = "serde")]

use rawq::counters::DeviceCounters;
use rawq::{Backend, Offload, Port, QueueStats, TxLedger};
use serde_json::{json, Value};

#[test]
fn queue_stats_and_the_tx_ledger_go_to_json_and_back() {
    let mut port = Port::builder(Backend::Loopback).queues(1).open().unwrap();
    let q = port.queue(0).unwrap();
    let mut burst = Vec::with_capacity(8);
    q.alloc_burst(&mut burst, 8).unwrap();
    for p in burst.iter_mut() {
        p.copy_from_slice(&[0u8; 60]).unwrap();
    }
    assert_eq!(q.tx_burst(&mut burst), 8);
    let s = q.stats();
    let v = serde_json::to_value(s).unwrap();
    assert_eq!(v["tx_packets"], 8);
    assert_eq!(v["tx_bytes"], 480);
    assert_eq!(v["tx_taken"], 8);
    assert_eq!(v.as_object().unwrap().len(), 13, "{v}");
    assert_eq!(serde_json::from_value::<QueueStats>(v).unwrap(), s);
    let l = s.tx_ledger();
    let v = serde_json::to_value(l).unwrap();
    assert_eq!(
        v,
        json!({"taken": 8, "sent": 8, "dropped": 0, "failed": 0, "unsent_at_close": 0,
               "fate_unknown": 0, "in_flight": 0, "double_counted": 0})
    );
    assert_eq!(serde_json::from_value::<TxLedger>(v).unwrap(), l);
}

#[test]
fn port_info_says_backend_mode_and_where_each_offload_is_done() {
    let port = Port::builder(Backend::Loopback).queues(2).open().unwrap();
    let v: Value = serde_json::to_value(port.info()).unwrap();
    assert_eq!(v["backend"], "loopback");
    assert_eq!(v["queues"], 2);
    assert_eq!(v["offloads"]["l4_csum"], "software");
    assert_eq!(v["offloads"]["rss"], "absent");
    let o: rawq::Offloads = serde_json::from_value(v["offloads"].clone()).unwrap();
    assert_eq!(o, port.info().offloads);
    assert_eq!(
        serde_json::from_value::<Offload>(json!("hardware")).unwrap(),
        Offload::Hardware
    );
    // A device counter the backend lacks is null, not 0.
    let mut d = DeviceCounters::default();
    d.rx_no_buffer = Some(3);
    let v = serde_json::to_value(d).unwrap();
    assert_eq!(v["rx_no_buffer"], 3);
    assert_eq!(v["rx_dropped"], Value::Null);
    assert_eq!(serde_json::from_value::<DeviceCounters>(v).unwrap(), d);
    let link = serde_json::to_value(port.link().unwrap()).unwrap();
    assert_eq!(link["carrier"], true, "{link}");
}
