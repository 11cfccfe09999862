//! `ndv devinfo`: ibv_devinfo's layout line for line (against real output of
//! Linux rxe in `testdata/ibv_devinfo/`), values from the engine, and no
//! socket bound (it runs next to the process that owns the device).

use ndverbs_testkit::{addr, netns::Netns, process};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;

const NDV: &str = env!("CARGO_BIN_EXE_ndv");

fn devinfo(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(NDV)
        .arg("devinfo")
        .args(args)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

fn reference(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/ibv_devinfo")
            .join(name),
    )
    .unwrap()
}

/// A line's shape: the text up to and including the tabs after its key (the
/// value removed); capability-flag names and GID entries are reduced to
/// their kind, since those lists differ between devices.
fn shape(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for l in text.lines() {
        let s = if l.starts_with("\t\t\t\t\t") {
            "<flag>".to_string()
        } else if l.trim_start().starts_with("GID[") {
            "<gid>".to_string()
        } else {
            match l.find(':') {
                Some(i) => {
                    let rest = &l[i + 1..];
                    let tabs = rest.len() - rest.trim_start_matches('\t').len();
                    format!("{}{}", &l[..=i], &rest[..tabs])
                }
                None => l.to_string(),
            }
        };
        if (s == "<flag>" || s == "<gid>") && out.last() == Some(&s) {
            continue;
        }
        out.push(s);
    }
    out
}

/// The first device block of devinfo output.
fn first_block(text: &str) -> String {
    let end = text.find("\n\n").map_or(text.len(), |i| i + 2);
    text[..end].to_string()
}

#[test]
fn layout_matches_ibv_devinfo() {
    for (args, file) in [(&[][..], "rxe.txt"), (&["-v"][..], "rxe-v.txt")] {
        let (ok, out, err) = devinfo(args);
        assert!(ok, "{err}");
        let ours = first_block(&out);
        assert_eq!(
            shape(&ours),
            shape(&reference(file)),
            "ndv devinfo {args:?}:\n{ours}"
        );
        // Values that are the same for every RoCE device.
        for l in [
            "\ttransport:\t\t\tInfiniBand (0)\n",
            "\t\t\tlink_layer:\t\tEthernet\n",
            "\t\t\tmax_mtu:\t\t4096 (5)\n",
        ] {
            assert!(ours.contains(l), "{l:?} missing:\n{ours}");
        }
    }
}

/// `lo`'s own address: the device devinfo describes is an interface's
/// (devinfo opens nothing, so no test address is needed).
#[test]
fn values_come_from_the_engine_and_the_interface() {
    let (ok, out, _) = devinfo(&["-v", "-d", "127.0.0.1"]);
    assert!(ok);
    let guid = ndverbs_verbs::node_guid("127.0.0.1".parse().unwrap());
    let g = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        guid >> 48,
        (guid >> 32) & 0xffff,
        (guid >> 16) & 0xffff,
        guid & 0xffff
    );
    assert!(out.contains(&format!("\tnode_guid:\t\t\t{g}\n")), "{out}");
    assert!(
        out.contains(&format!("\tsys_image_guid:\t\t\t{g}\n")),
        "{out}"
    );
    // lo's MTU is 65536: the largest IB MTU.
    assert!(out.contains("\t\t\tactive_mtu:\t\t4096 (5)\n"), "{out}");
    assert!(
        out.contains("\t\t\tGID[  0]:\t\t::ffff:127.0.0.1, RoCE v2\n"),
        "{out}"
    );
    assert!(out.contains(&format!(
        "\tmax_qp_wr:\t\t\t{}\n",
        ndverbs_verbs::LIMITS.max_qp_wr
    )));
    // -l: the names; -d by name gives the same block as by address.
    let (_, list, _) = devinfo(&["-l"]);
    let names: Vec<&str> = list
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    assert!(list.starts_with(&format!(
        "{} HCA{} found:\n",
        names.len(),
        if names.len() == 1 { "" } else { "s" }
    )));
    let name = out.lines().next().unwrap().trim_start_matches("hca_id:\t");
    assert!(names.contains(&name), "{list}");
    assert_eq!(devinfo(&["-v", "-d", name]).1, out);
    // Unknown device: ibv_devinfo's message and status.
    let o = Command::new(NDV)
        .args(["devinfo", "-d", "nope"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(255));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "IB device 'nope' wasn't found\n"
    );
}

/// In a namespace: an IPv6 device on a 1500-byte veth has active MTU 1024
/// and its address as GID, and devinfo works while `ndv ping -s` owns the
/// device's UDP 4791 (devinfo binds nothing).
#[test]
fn ipv6_device_while_another_process_owns_it() {
    let (ip_a, ip_b) = addr::pair_v6();
    let Some((a, _b)) = Netns::veth_pair(&format!("{ip_a}/64"), &format!("{ip_b}/64")) else {
        return;
    };
    let ip_a = ip_a.to_string();
    let server = process::start_server(
        a.command(NDV)
            .args(["ping", "-s", "-a", &ip_a, "-p", "7421"]),
    );
    let o = a
        .command(NDV)
        .args(["devinfo", "-v", "-d", &ip_a])
        .output()
        .unwrap();
    drop(server.kill());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("\t\t\tactive_mtu:\t\t1024 (3)\n"), "{out}");
    assert!(out.contains("\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"), "{out}");
    assert!(
        out.contains(&format!("\t\t\tGID[  0]:\t\t{ip_a}, RoCE v2\n")),
        "{out}"
    );
    let guid = ndverbs_verbs::node_guid(ip_a.parse::<IpAddr>().unwrap());
    assert!(out.contains(&format!("{:04x}\n", guid & 0xffff)), "{out}");
    // The link-local address of veth0 is no device (it needs a scope).
    let (_, list) = (
        (),
        String::from_utf8(
            a.command(NDV)
                .args(["devinfo", "-v"])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap(),
    );
    assert!(!list.contains("GID[  0]:\t\tfe80:"), "{list}");
}

/// The `NDV_*` switches every tool reads are checked, not guessed at: a
/// word that is neither position is refused with the variable named, and
/// either position (or the empty string) is taken.
#[test]
fn a_malformed_switch_in_the_environment_is_refused() {
    for (var, bad) in [("NDV_SPIN", "sometimes"), ("NDV_CC", "dcqcn")] {
        let o = Command::new(NDV)
            .arg("devinfo")
            .env(var, bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{var}={bad} accepted");
        assert!(err.contains(&format!("{var}={bad}: expected")), "{err}");
    }
    for (var, good) in [("NDV_SPIN", "off"), ("NDV_SPIN", "on"), ("NDV_SPIN", "")] {
        let o = Command::new(NDV)
            .arg("devinfo")
            .env(var, good)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{var}={good}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
