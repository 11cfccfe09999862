//! The symbols and versions of the linked `libibverbs.so.1`, against what
//! rdma-core 44 exports and what Debian 12's RDMA programs import
//! (`testdata/ibverbs-abi`). Load-time binding (`BIND_NOW`, used by nearly
//! every Debian build) needs every imported symbol with its exact version;
//! a symbol in a version node where rdma-core has none would bind programs
//! to a version the real library lacks.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

fn testdata(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/ibverbs-abi")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// symbol → version node, from the linker version script.
fn version_script() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut node = None;
    let text = ndverbs_cabi::install::VERSION_SCRIPT;
    // Without the leading comment.
    let body = &text[text.find("*/").map_or(0, |i| i + 2)..];
    for line in body.lines().map(str::trim) {
        if let Some(name) = line.strip_suffix('{').map(str::trim) {
            node = Some(name.to_string());
        } else if line.starts_with('}') {
            node = None;
        } else if let (Some(n), Some(sym)) = (&node, line.strip_suffix(';')) {
            if !sym.contains(':') && sym != "*" {
                let old = out.insert(sym.to_string(), n.clone());
                assert!(old.is_none(), "{sym} twice in the version script");
            }
        }
    }
    out
}

/// (symbol, version) pairs of rdma-core's export lists, hidden nodes left out.
fn rdma_core_exports() -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for file in [
        "rdma-core44-libibverbs-exports.txt",
        "rdma-core44-librdmacm-exports.txt",
    ] {
        for line in testdata(file).lines() {
            let Some((node, syms)) = line.split_once(':') else {
                continue;
            };
            if node.starts_with('(') {
                continue;
            }
            for s in syms.split_whitespace().filter(|s| *s != node) {
                out.insert((s.to_string(), node.to_string()));
            }
        }
    }
    out
}

/// (symbol, version) pairs the Debian programs import (`Base`: unversioned).
fn debian_imports() -> BTreeSet<(String, String)> {
    testdata("union-imports.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let sym = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            Some((sym.to_string(), cells.get(2)?.to_string()))
        })
        .collect()
}

#[test]
fn every_import_of_the_debian_programs_is_defined_with_its_version() {
    let ours = version_script();
    let imports = debian_imports();
    assert!(imports.len() > 100, "{} imports read", imports.len());
    for (sym, ver) in &imports {
        let Some(node) = ours.get(sym) else {
            panic!("{sym}@{ver} is imported but not exported");
        };
        assert!(
            ver == "Base" || node == ver,
            "{sym}: imported @{ver}, exported @{node}"
        );
    }
}

/// Debian's pyverbs (rdma-core's Python binding) loads its provider
/// modules (mlx5, efa) whatever the device, so their imports must bind too.
#[test]
fn every_import_of_pyverbs_is_defined_with_its_version() {
    let ours = version_script();
    let imports: Vec<(String, String)> = testdata("pyverbs44-imports.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .map(|(s, v)| (s.to_string(), v.to_string()))
        .collect();
    assert!(imports.len() > 150, "{} imports read", imports.len());
    for (sym, ver) in &imports {
        assert_eq!(ours.get(sym), Some(ver), "{sym}@{ver}");
    }
}

#[test]
fn rdma_core_nodes_hold_only_what_rdma_core_puts_there() {
    let rdma_core = rdma_core_exports();
    for (sym, node) in version_script() {
        if node.starts_with("IBVERBS") || node.starts_with("RDMACM") {
            assert!(
                rdma_core.contains(&(sym.clone(), node.clone())),
                "{sym}@{node} is not in rdma-core 44's export list"
            );
        }
    }
}

/// `objdump -T` of the linked library: every symbol of the version script
/// defined with its version, the version nodes' parents as rdma-core's, the
/// SONAME, load-time binding of its own dependencies not required.
#[test]
fn the_linked_library_defines_every_symbol_with_its_version() {
    if !ndverbs_testkit::skip::require_tools_for("inspecting the library", &["objdump"]) {
        return;
    }
    let so = common::lib_dir().join(ndverbs_cabi::install::SONAME);
    let dyn_syms = Command::new("objdump")
        .arg("-T")
        .arg(&so)
        .output()
        .expect("objdump -T");
    let text = String::from_utf8_lossy(&dyn_syms.stdout);
    let defined: BTreeSet<(String, String)> = text
        .lines()
        .filter(|l| !l.contains("*UND*"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3).then(|| (f[f.len() - 1].to_string(), f[f.len() - 2].to_string()))
        })
        .collect();
    let ours = version_script();
    for (sym, node) in &ours {
        assert!(
            defined.contains(&(sym.clone(), node.clone())),
            "{sym}@{node} not defined by {}",
            so.display()
        );
    }
    // Nothing else is exported (the Rust runtime stays local).
    let versioned: BTreeSet<&String> = defined
        .iter()
        .filter(|(_, v)| v.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .map(|(s, _)| s)
        .filter(|s| !s.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
        .collect();
    let expected: BTreeSet<&String> = ours.keys().collect();
    assert_eq!(versioned, expected);
    let headers = Command::new("objdump")
        .arg("-p")
        .arg(&so)
        .output()
        .expect("objdump -p");
    let h = String::from_utf8_lossy(&headers.stdout);
    assert!(h.contains("SONAME               libibverbs.so.1"), "{h}");
    for (child, parent) in [
        ("IBVERBS_1.1", "IBVERBS_1.0"),
        ("IBVERBS_1.14", "IBVERBS_1.13"),
        ("RDMACM_1.3", "RDMACM_1.2"),
        ("MLX5_1.21", "MLX5_1.11"),
        ("EFA_1.2", "EFA_1.1"),
    ] {
        let at = h
            .find(&format!(" {child}\n"))
            .unwrap_or_else(|| panic!("no node {child}:\n{h}"));
        assert!(
            h[at..].lines().nth(1).is_some_and(|l| l.trim() == parent),
            "{child}'s parent:\n{h}"
        );
    }
    for alias in ndverbs_cabi::install::ALIASES {
        let target = std::fs::read_link(common::lib_dir().join(alias)).expect(alias);
        assert_eq!(target, Path::new(ndverbs_cabi::install::SONAME));
    }
}
