//! With the `serde` feature, `Stats` serializes as a map from counter name to
//! value in the order of `Stats::pairs`: the same object `Stats::to_json`
//! writes, after real traffic so the values are not all zero.
#![cfg(feature = "serde")]

use ndverbs_testkit::verbs::Pair;

#[test]
fn stats_serialize_as_an_ordered_map_of_counters() {
    let pair = Pair::new();
    pair.send(20, 3000, 4);
    let stats = pair.a.dev.stats();
    assert!(stats.get("sent_pkts") >= 20 * 3);

    let text = serde_json::to_string(&stats).unwrap();
    assert_eq!(text, stats.to_json());
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let map = value.as_object().unwrap();
    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
    let names: Vec<&str> = stats.pairs().iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(keys, names);
    for (name, v) in stats.pairs() {
        assert_eq!(map[name].as_u64(), Some(*v), "{name}");
    }
}
