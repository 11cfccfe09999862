//! `ndv devinfo`: `ibv_devinfo` for ndverbs devices.
//!
//! One device per local IP address that can host an adapter (the ND
//! provider's address list, minus IPv6 link-local addresses, which need a
//! scope), named `ndv0`, `ndv1`, … in address order. Each has one port whose
//! GID table holds its address (IPv4 as `::ffff:a.b.c.d`), RoCE v2. The layout
//! is `ibv_devinfo`'s (rdma-core `libibverbs/examples/devinfo.c`) to the tab;
//! values come from verbs (`Device::list`: the interface's state and MTU,
//! the node GUID; the device limits). Nothing is opened: devinfo binds no socket, so it runs next to the
//! processes that own the devices.

use crate::Exit;
use anyhow::{bail, Result};
use ndverbs_verbs::{Device, DeviceInfo, LIMITS};
use std::fmt::Write as _;
use std::net::IpAddr;

/// `ibv_devinfo` options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this device (a name such as `ndv0`, or its IP address).
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<String>,
    /// Only this port (every ndverbs device has port 1).
    #[arg(short = 'i', long = "ib-port")]
    pub port: Option<u32>,
    /// List device names only.
    #[arg(short = 'l', long = "list")]
    pub list: bool,
    /// Everything: device limits, port details, the GID table.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
}

fn guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

fn gid_text(addr: IpAddr) -> String {
    ndverbs_wire::cma::gid_of(addr).to_string()
}

/// `IBV_DEVICE_*` capability bits ndverbs has, with devinfo's names.
const CAPS: [(u32, &str); 3] = [
    (1 << 11, "SYS_IMAGE_GUID"),
    (1 << 12, "RC_RNR_NAK_GEN"),
    (1 << 17, "MEM_WINDOW"),
];

/// The text `ibv_devinfo [-v]` prints for `d` (`port` limits the ports).
pub fn render(d: &DeviceInfo, verbose: bool, port: Option<u32>) -> String {
    let mut s = String::new();
    let g = guid(d.node_guid());
    let w = &mut s;
    let _ = writeln!(w, "hca_id:\t{}", d.name);
    let _ = writeln!(w, "\ttransport:\t\t\tInfiniBand (0)");
    let _ = writeln!(w, "\tfw_ver:\t\t\t\t{}", env!("CARGO_PKG_VERSION"));
    let _ = writeln!(w, "\tnode_guid:\t\t\t{g}");
    let _ = writeln!(w, "\tsys_image_guid:\t\t\t{g}");
    let _ = writeln!(w, "\tvendor_id:\t\t\t0xffffff");
    let _ = writeln!(w, "\tvendor_part_id:\t\t\t0");
    let _ = writeln!(w, "\thw_ver:\t\t\t\t0x0");
    let _ = writeln!(w, "\tphys_port_cnt:\t\t\t1");
    if verbose {
        let l = LIMITS;
        let caps: u32 = CAPS.iter().map(|c| c.0).sum();
        let _ = writeln!(w, "\tmax_mr_size:\t\t\t0x{:x}", l.max_mr_size);
        let _ = writeln!(w, "\tpage_size_cap:\t\t\t0xfffff000");
        let _ = writeln!(w, "\tmax_qp:\t\t\t\t{}", l.max_qp);
        let _ = writeln!(w, "\tmax_qp_wr:\t\t\t{}", l.max_qp_wr);
        let _ = writeln!(w, "\tdevice_cap_flags:\t\t0x{caps:08x}");
        for (_, name) in CAPS {
            let _ = writeln!(w, "\t\t\t\t\t{name}");
        }
        let _ = writeln!(w, "\tmax_sge:\t\t\t{}", l.max_sge);
        let _ = writeln!(w, "\tmax_sge_rd:\t\t\t{}", l.max_sge);
        let _ = writeln!(w, "\tmax_cq:\t\t\t\t{}", 1u32 << 20);
        let _ = writeln!(w, "\tmax_cqe:\t\t\t{}", l.max_cqe);
        let _ = writeln!(w, "\tmax_mr:\t\t\t\t{}", 1u32 << 20);
        let _ = writeln!(w, "\tmax_pd:\t\t\t\t{}", 1u32 << 20);
        let _ = writeln!(w, "\tmax_qp_rd_atom:\t\t\t{}", l.max_qp_rd_atom);
        let _ = writeln!(w, "\tmax_ee_rd_atom:\t\t\t0");
        let _ = writeln!(
            w,
            "\tmax_res_rd_atom:\t\t{}",
            u64::from(l.max_qp_rd_atom) * u64::from(l.max_qp)
        );
        let _ = writeln!(w, "\tmax_qp_init_rd_atom:\t\t{}", l.max_qp_rd_atom);
        let _ = writeln!(w, "\tmax_ee_init_rd_atom:\t\t0");
        let _ = writeln!(w, "\tatomic_cap:\t\t\tATOMIC_HCA (1)");
        let _ = writeln!(w, "\tmax_ee:\t\t\t\t0");
        let _ = writeln!(w, "\tmax_rdd:\t\t\t0");
        let _ = writeln!(w, "\tmax_mw:\t\t\t\t{}", 1u32 << 20);
        let _ = writeln!(w, "\tmax_raw_ipv6_qp:\t\t0");
        let _ = writeln!(w, "\tmax_raw_ethy_qp:\t\t0");
        let _ = writeln!(w, "\tmax_mcast_grp:\t\t\t0");
        let _ = writeln!(w, "\tmax_mcast_qp_attach:\t\t0");
        let _ = writeln!(w, "\tmax_total_mcast_qp_attach:\t0");
        let _ = writeln!(w, "\tmax_ah:\t\t\t\t0");
        let _ = writeln!(w, "\tmax_fmr:\t\t\t0");
        let _ = writeln!(w, "\tmax_srq:\t\t\t{}", 1u32 << 20);
        let _ = writeln!(w, "\tmax_srq_wr:\t\t\t{}", l.max_qp_wr);
        let _ = writeln!(w, "\tmax_srq_sge:\t\t\t{}", l.max_sge);
        let _ = writeln!(w, "\tmax_pkeys:\t\t\t1");
        let _ = writeln!(w, "\tlocal_ca_ack_delay:\t\t15");
        let _ = writeln!(w, "\tgeneral_odp_caps:");
        for t in ["rc", "uc", "ud", "xrc"] {
            let _ = writeln!(w, "\t{t}_odp_caps:");
            let _ = writeln!(w, "\t\t\t\t\tNO SUPPORT");
        }
        let _ = writeln!(w, "\tcompletion_timestamp_mask not supported");
        let _ = writeln!(w, "\tcore clock not supported");
        let _ = writeln!(w, "\tdevice_cap_flags_ex:\t\t0x{caps:X}");
        let _ = writeln!(w, "\ttso_caps:");
        let _ = writeln!(w, "\t\tmax_tso:\t\t\t0");
        let _ = writeln!(w, "\trss_caps:");
        let _ = writeln!(w, "\t\tmax_rwq_indirection_tables:\t\t\t0");
        let _ = writeln!(w, "\t\tmax_rwq_indirection_table_size:\t\t\t0");
        let _ = writeln!(w, "\t\trx_hash_function:\t\t\t\t0x0");
        let _ = writeln!(w, "\t\trx_hash_fields_mask:\t\t\t\t0x0");
        let _ = writeln!(w, "\tmax_wq_type_rq:\t\t\t0");
        let _ = writeln!(w, "\tpacket_pacing_caps:");
        let _ = writeln!(w, "\t\tqp_rate_limit_min:\t0kbps");
        let _ = writeln!(w, "\t\tqp_rate_limit_max:\t0kbps");
        let _ = writeln!(w, "\ttag matching not supported");
        let _ = writeln!(w, "\tnum_comp_vectors:\t\t1");
    }
    if port.is_none_or(|p| p == 1) {
        let mtu = d.active_mtu();
        let (state, phys) = if d.link_up {
            ("PORT_ACTIVE (4)", "LINK_UP (5)")
        } else {
            ("PORT_DOWN (1)", "DISABLED (3)")
        };
        let _ = writeln!(w, "\t\tport:\t1");
        let _ = writeln!(w, "\t\t\tstate:\t\t\t{state}");
        let _ = writeln!(w, "\t\t\tmax_mtu:\t\t4096 (5)");
        let _ = writeln!(w, "\t\t\tactive_mtu:\t\t{} ({})", mtu.bytes(), mtu as u8);
        let _ = writeln!(w, "\t\t\tsm_lid:\t\t\t0");
        let _ = writeln!(w, "\t\t\tport_lid:\t\t0");
        let _ = writeln!(w, "\t\t\tport_lmc:\t\t0x00");
        let _ = writeln!(w, "\t\t\tlink_layer:\t\tEthernet");
        if verbose {
            let _ = writeln!(w, "\t\t\tmax_msg_sz:\t\t0x{:x}", LIMITS.max_msg_size);
            let _ = writeln!(w, "\t\t\tport_cap_flags:\t\t0x00010000");
            let _ = writeln!(w, "\t\t\tport_cap_flags2:\t0x0000");
            let _ = writeln!(w, "\t\t\tmax_vl_num:\t\t1 (1)");
            let _ = writeln!(w, "\t\t\tbad_pkey_cntr:\t\t0x0");
            let _ = writeln!(w, "\t\t\tqkey_viol_cntr:\t\t0x0");
            let _ = writeln!(w, "\t\t\tsm_sl:\t\t\t0");
            let _ = writeln!(w, "\t\t\tpkey_tbl_len:\t\t1");
            let _ = writeln!(w, "\t\t\tgid_tbl_len:\t\t1");
            let _ = writeln!(w, "\t\t\tsubnet_timeout:\t\t0");
            let _ = writeln!(w, "\t\t\tinit_type_reply:\t0");
            let _ = writeln!(w, "\t\t\tactive_width:\t\t1X (1)");
            let _ = writeln!(w, "\t\t\tactive_speed:\t\t10.0 Gbps (8)");
            let _ = writeln!(w, "\t\t\tphys_state:\t\t{phys}");
            let _ = writeln!(w, "\t\t\tGID[  0]:\t\t{}, RoCE v2", gid_text(d.addr));
        }
    }
    s.push('\n');
    s
}

/// Runs `ndv devinfo`.
pub fn run(a: &Args) -> Result<()> {
    let devs = Device::list()?;
    if a.list {
        let n = devs.len();
        println!("{n} HCA{} found:", if n == 1 { "" } else { "s" });
        for d in &devs {
            println!("\t{}", d.name);
        }
        println!();
        return Ok(());
    }
    let chosen: Vec<&DeviceInfo> = match &a.dev {
        None => devs.iter().collect(),
        Some(want) => {
            let ip: Option<IpAddr> = want.parse().ok();
            let v: Vec<&DeviceInfo> = devs
                .iter()
                .filter(|d| &d.name == want || Some(d.addr) == ip)
                .collect();
            if v.is_empty() {
                eprintln!("IB device '{want}' wasn't found");
                return Err(Exit(255).into());
            }
            v
        }
    };
    if chosen.is_empty() {
        println!("No IB devices found");
        return Ok(());
    }
    if let Some(p) = a.port {
        if p != 1 {
            bail!("invalid port {p} (every ndverbs device has port 1)");
        }
    }
    let mut out = String::new();
    for d in chosen {
        out.push_str(&render(d, a.verbose, a.port));
    }
    print!("{out}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_groups() {
        assert_eq!(guid(0x5054_00ff_fe77_0002), "5054:00ff:fe77:0002");
    }
}
