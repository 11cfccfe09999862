//! Owned buffers registered without `unsafe` at the ND surface.

use ndverbs_nd::*;

fn adapter() -> Adapter {
    let (ip, _) = ndverbs_testkit::addr::pair_v4();
    Provider.open_adapter(ip).unwrap()
}

#[test]
fn the_buffer_comes_back_only_as_its_own_type() {
    let a = adapter();
    let mr = a.create_memory_region().unwrap();
    let buf = AlignedBuf::zeroed(4096, 64).unwrap();
    mr.register_buffer(buf, MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap();
    let token = mr.local_token();
    assert_ne!(token, 0);
    // Asking for another type leaves the region registered.
    let e = mr.deregister_buffer::<Vec<u8>>().unwrap_err();
    assert_eq!(e.status, NdStatus::INVALID_PARAMETER, "{e}");
    assert_eq!(mr.local_token(), token);
    mr.write(10, b"x").unwrap();
    let back: AlignedBuf = mr.deregister_buffer().unwrap();
    assert_eq!(back.as_slice()[10], b'x');
    assert!(mr.is_empty());
}

#[test]
fn a_region_registered_otherwise_has_no_buffer_to_give() {
    let a = adapter();
    let mr = a.create_memory_region().unwrap();
    mr.register(4096, MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap();
    let e = mr.deregister_buffer::<Vec<u8>>().unwrap_err();
    assert_eq!(e.status, NdStatus::INVALID_PARAMETER, "{e}");
    mr.deregister().wait().unwrap();
    let e = mr.deregister_buffer::<Vec<u8>>().unwrap_err();
    assert_eq!(e.status, NdStatus::INVALID_DEVICE_STATE, "{e}");
}

#[test]
fn bad_lengths_and_flags_are_refused_as_register_refuses_them() {
    let a = adapter();
    let mr = a.create_memory_region().unwrap();
    let e = mr
        .register_buffer(Vec::new(), MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap_err();
    assert_eq!(e.status, NdStatus::INVALID_BUFFER_SIZE);
    let e = mr
        .register_buffer(vec![0u8; 64], MrFlags::from_bits_retain(0x100))
        .wait()
        .unwrap_err();
    assert_eq!(e.status, NdStatus::INVALID_PARAMETER_3);
    assert!(mr.is_empty());
    // Dropped registered: deregistered, then the buffer freed.
    mr.register_buffer(vec![1u8; 64], MrFlags::ALLOW_LOCAL_WRITE)
        .wait()
        .unwrap();
    drop(mr);
}
