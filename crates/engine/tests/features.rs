//! What a NIC built without a layer says when asked for it, and that a NIC
//! built with it turns it on. `scripts/features.sh` runs this file without
//! the default features too.

use ndverbs_engine::config::{NicConfig, Progress};
use ndverbs_engine::link::faults::FaultConfig;
use ndverbs_engine::nic::Nic;

fn lossy() -> FaultConfig {
    FaultConfig::parse("loss=0.5").unwrap()
}

fn nic() -> Nic {
    Nic::open(ndverbs_testkit::addr::v4(), Progress::Manual).unwrap()
}

#[test]
fn fault_injection_when_built_in_and_an_error_otherwise() {
    let set = nic().set_faults(Some(lossy()));
    let open = Nic::open_with(
        ndverbs_testkit::addr::v4(),
        NicConfig {
            faults: Some(lossy()),
            ..NicConfig::default()
        },
    );
    if cfg!(feature = "faults") {
        assert!(set.is_ok() && open.is_ok());
    } else {
        let e = set.unwrap_err().to_string();
        assert!(e.contains("feature `faults`"), "{e}");
        assert!(open.unwrap_err().to_string().contains("feature `faults`"));
        // Turning it off is always fine.
        nic().set_faults(None).unwrap();
    }
}

#[test]
fn capture_when_built_in_and_an_error_otherwise() {
    let dir = std::env::temp_dir().join(format!("ndv-features-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("c.pcap");
    let n = nic();
    let r = n.set_capture(Some(&path));
    if cfg!(feature = "capture") {
        r.unwrap();
        assert!(n.capture().is_some());
    } else {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("feature `capture`"), "{e}");
        assert!(n.capture().is_none());
    }
    n.set_capture(None).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
