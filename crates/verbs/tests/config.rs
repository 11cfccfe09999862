//! Configuration is by API: the `NDV_*` variables change nothing unless the
//! program asks for them with `DeviceConfig::from_env`. One test in its own
//! binary, because it sets process-wide environment variables.

use ndverbs_verbs::*;

#[test]
fn the_environment_is_read_only_when_asked() {
    let file = std::env::temp_dir().join(format!("verbs-env-{}.pcap", std::process::id()));
    std::env::set_var(PCAP_ENV, &file);
    std::env::set_var(FAULTS_ENV, "loss=0.5,seed=9");
    std::env::set_var(STAT_ENV, "0");
    std::env::set_var(METRICS_ENV, "127.92.30.4:0");
    // Set, but not asked for: the device captures nothing.
    let plain = Device::open("127.92.30.1".parse().unwrap()).unwrap();
    assert_eq!(plain.capture_path(), None);
    // Asked for: everything the variables say.
    let cfg = DeviceConfig::from_env().unwrap();
    assert_eq!(cfg.capture.as_deref(), Some(file.as_path()));
    assert_eq!(
        cfg.faults,
        Some(FaultConfig::parse("loss=0.5,seed=9").unwrap())
    );
    assert!(!cfg.publish_stats);
    assert_eq!(cfg.metrics, Some("127.92.30.4:0".parse().unwrap()));
    assert_eq!(cfg.progress, Progress::Thread);
    let dev = Device::open_with("127.92.30.2".parse().unwrap(), &cfg).unwrap();
    assert_eq!(dev.capture_path(), Some(file.clone()));
    // A malformed fault specification is an error, not silence.
    std::env::set_var(FAULTS_ENV, "loss=lots");
    let e = DeviceConfig::from_env().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("NDV_FAULTS"), "{e}");
    std::env::remove_var(FAULTS_ENV);
    std::env::set_var(METRICS_ENV, "localhost");
    let e = DeviceConfig::from_env().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("NDV_METRICS=localhost"), "{e}");
    // A capture file that cannot be written fails the open, naming it.
    let bad = DeviceConfig {
        capture: Some("/nonexistent/dir/y.pcap".into()),
        ..DeviceConfig::default()
    };
    let e = Device::open_with("127.92.30.3".parse().unwrap(), &bad).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("/nonexistent/dir/y.pcap"), "{e}");
    // NDV_SHARE=1: two devices on one address (in one process here; the
    // engine's share_port test runs them as processes), each with QPNs of
    // its own slot; a device that does not share finds the port taken.
    std::env::remove_var(METRICS_ENV);
    std::env::remove_var(PCAP_ENV);
    std::env::set_var(SHARE_ENV, "1");
    let cfg = DeviceConfig::from_env().unwrap();
    assert!(cfg.share_port);
    let ip = "127.92.30.5".parse().unwrap();
    let (s1, s2) = (
        Device::open_with(ip, &cfg).unwrap(),
        Device::open_with(ip, &cfg).unwrap(),
    );
    let e = Device::open(ip).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddressInUse);
    let qpn = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let cq = d.create_cq(4).unwrap();
        let qp = pd.create_qp(&QpInitAttr::new(&cq, &cq)).unwrap();
        qp.qpn()
    };
    assert_ne!(qpn(&s1) >> 16, qpn(&s2) >> 16);
    // An rdma_cm port is the address's, as with the kernel's rdma_cm.
    let l1 = Endpoint::new(&s1).unwrap();
    l1.listen(7300, 1).unwrap();
    let l2 = Endpoint::new(&s2).unwrap();
    let e = l2.listen(7300, 1).unwrap_err();
    assert_eq!(
        (e.kind(), e.errno()),
        (ErrorKind::AddressInUse, libc::EADDRINUSE)
    );
    drop(l1);
    l2.listen(7300, 1).unwrap();
    drop((plain, dev, s1, s2));
    let _ = std::fs::remove_file(&file);
}
