//! RoCE "twins": a DGX Spark shows each QSFP port as two PCIe x4 functions, so one cable
//! appears as two netdevs and two RDMA devices (`enp1s0f1np1`/`enP2p1s0f1np1`,
//! `rocep1s0f1`/`roceP2p1s0f1`), about 100 Gb/s each. Full bandwidth needs both.
//!
//! Twins are recognised from the netdev names the kernel gives them (systemd's predictable
//! names: `en` + optional `P<domain>` + `p<bus>s<slot>f<function>` + `np<port>`): two netdevs
//! of different RDMA devices whose names differ only in the PCI domain part are twins. A
//! ConnectX-5 with `enp1s0f0np0`/`enp1s0f1np1` has no twins (different functions).

use super::super::probe::facts::{IbDevice, NetIf, NodeFacts};

/// The name with its PCI domain part removed: `enP2p1s0f1np1` → `enp1s0f1np1`. `None` for
/// names that do not follow the PCI path scheme (`eth0`, `mlx5_0`'s `ib0`).
pub fn twin_key(netdev: &NetIf) -> Option<String> {
    let name = netdev.as_str();
    let rest = name.strip_prefix("en")?;
    let rest = match rest.strip_prefix('P') {
        Some(after) => {
            let digits = after.chars().take_while(|c| c.is_ascii_digit()).count();
            if digits == 0 {
                return None;
            }
            &after[digits..]
        }
        None => rest,
    };
    // What remains must be a PCI path: p<bus>s<slot>...
    let mut chars = rest.chars();
    if chars.next() != Some('p') || !chars.next().is_some_and(|c| c.is_ascii_digit()) {
        return None;
    }
    if !rest.contains('s') {
        return None;
    }
    Some(format!("en{rest}"))
}

/// The RDMA devices on `facts` that are twins of `device` (same key, different device).
pub fn twins_of<'a>(facts: &'a NodeFacts, device: &IbDevice) -> Vec<&'a IbDevice> {
    let Some(dev) = facts.rdma_device(device) else {
        return Vec::new();
    };
    let keys: Vec<String> = dev.netdevs.iter().filter_map(twin_key).collect();
    if keys.is_empty() {
        return Vec::new();
    }
    facts
        .rdma_devices
        .iter()
        .filter(|d| &d.name != device)
        .filter(|d| {
            d.netdevs
                .iter()
                .filter_map(twin_key)
                .any(|k| keys.contains(&k))
        })
        .map(|d| &d.name)
        .collect()
}

/// The key that groups a device with its twins (for ordering `NCCL_IB_HCA`): the twin key of
/// its first netdev, or its own name when it has none.
pub fn group_key(facts: &NodeFacts, device: &IbDevice) -> String {
    facts
        .rdma_device(device)
        .and_then(|d| d.netdevs.iter().find_map(twin_key))
        .unwrap_or_else(|| device.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Option<String> {
        twin_key(&NetIf::new(s))
    }

    #[test]
    fn spark_twins_share_a_key_that_ignores_the_pci_domain() {
        assert_eq!(key("enp1s0f1np1").as_deref(), Some("enp1s0f1np1"));
        assert_eq!(key("enP2p1s0f1np1").as_deref(), Some("enp1s0f1np1"));
        assert_eq!(key("enP2p1s0f0np0").as_deref(), Some("enp1s0f0np0"));
    }

    #[test]
    fn the_two_ports_of_one_card_are_not_twins() {
        assert_ne!(key("enp1s0f0np0"), key("enp1s0f1np1"));
    }

    #[test]
    fn names_outside_the_pci_scheme_have_no_twin_key() {
        assert_eq!(key("eth0"), None);
        assert_eq!(key("ib0"), None);
        assert_eq!(key("enP7"), None);
        assert_eq!(key("eno2np1"), None);
        assert_eq!(key("wlP9s9"), None);
    }
}
