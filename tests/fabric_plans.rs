//! `fabric plan` on every fixture cluster, through the real reader and planner: the table and
//! the JSON snapshot-tested, refusals with the cable to move, and every netplan file the plans
//! contain validated by the real netplan (`netplan generate --root-dir`, Debian's netplan.io):
//! a file it rejects, or whose networkd output lacks the planned address or MTU, fails.

use std::process::Command;

use spark_launch::fabric::{self, FabricPlan, PlanError, PlanOptions, render};
use spark_launch::node::NodeName;
use spark_launch::probe::facts::NetIf;
use spark_launch::probe::links::LinkArg;

mod support;
use support::fixtures::fixture_nodes;

fn links(args: &[&str]) -> Vec<LinkArg> {
    args.iter()
        .map(|a| a.parse().expect("valid --link"))
        .collect()
}

fn plan_of(name: &str, given: &[&str], opts: &PlanOptions) -> Result<FabricPlan, PlanError> {
    fabric::plan(&fixture_nodes(name), &links(given), opts)
}

fn json_of(r: &Result<FabricPlan, PlanError>) -> serde_json::Value {
    match r {
        Ok(p) => serde_json::to_value(p).expect("serialises"),
        Err(PlanError::Refused(r)) => serde_json::json!({ "refused": r.problems }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

const TRIANGLE: [&str; 3] = [
    "titanic:enp1s0f0np0=iceberg:enp1s0f0np0",
    "titanic:enp1s0f1np1=carpathia:enp1s0f0np0",
    "iceberg:enp1s0f1np1=carpathia:enp1s0f1np1",
];

/// (snapshot name, fixture, --link, --link-local)
const CASES: [(&str, &str, &[&str], bool); 13] = [
    ("fresh-two-sparks", "fresh-two-sparks", &[], false),
    ("fresh-mgmt-in-pool", "fresh-mgmt-in-pool", &[], false),
    ("fresh-triangle-by-link", "fresh-triangle", &TRIANGLE, false),
    (
        "fresh-spark-and-workstation",
        "fresh-spark-and-workstation",
        &[],
        false,
    ),
    ("fresh-two-sparks-link-local", "fresh-two-sparks", &[], true),
    (
        "seed-001-two-sparks-both-twins",
        "seed-001-two-sparks-both-twins",
        &[],
        false,
    ),
    ("seed-000-one-twin", "seed-000-one-twin", &[], false),
    ("seed-002-link-local", "seed-002-link-local", &[], false),
    ("seed-003-triangle", "seed-003-triangle", &[], false),
    (
        "seed-004-spark-and-workstation",
        "seed-004-spark-and-workstation",
        &[],
        false,
    ),
    ("switch-3-sparks", "switch-3-sparks", &[], false),
    ("ring-4-sparks", "ring-4-sparks", &[], false),
    ("broken-link-down", "broken-link-down", &[], false),
];

fn opts(link_local: bool) -> PlanOptions {
    PlanOptions {
        link_local,
        ..PlanOptions::default()
    }
}

#[test]
fn every_fixture_plans_to_the_same_json_and_text_as_reviewed() {
    for (snap, name, given, ll) in CASES {
        let r = plan_of(name, given, &opts(ll));
        insta::assert_json_snapshot!(format!("{snap}-json"), json_of(&r));
        let text = match &r {
            Ok(p) => render::text(p),
            Err(e) => e.to_string(),
        };
        insta::assert_snapshot!(format!("{snap}-text"), text);
    }
}

#[test]
fn fresh_sparks_get_a_subnet_per_twin_from_the_pool_and_mtu_9000() {
    let p = plan_of("fresh-two-sparks", &[], &opts(false)).unwrap();
    let v = serde_json::to_value(&p).unwrap();
    assert_eq!(v["topology"], "direct");
    assert_eq!(v["links"][0]["subnet"], "192.168.100.0/24");
    assert_eq!(v["links"][1]["subnet"], "192.168.101.0/24");
    assert_eq!(
        v["nodes"]["spark-8c04"]["addresses"]["enP2p1s0f1np1"],
        "192.168.101.2/24"
    );
    assert_eq!(v["nodes"]["spark-3f21"]["mtu"]["enp1s0f1np1"], 9000);
    assert_eq!(
        v["nodes"]["spark-3f21"]["file"],
        "/etc/netplan/40-spark-launch.yaml"
    );
    // DGX OS's NetworkManager file names no interface: no conflict.
    assert_eq!(v["nodes"]["spark-3f21"]["conflicts"], serde_json::json!([]));
}

#[test]
fn a_management_network_over_the_start_of_the_pool_is_skipped() {
    let p = plan_of("fresh-mgmt-in-pool", &[], &opts(false)).unwrap();
    assert_eq!(p.links[0].subnet.to_string(), "192.168.104.0/24");
    assert_eq!(p.links[1].subnet.to_string(), "192.168.105.0/24");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("skipped 192.168.100.0/24") && w.contains("192.168.100.0/22")),
        "{:?}",
        p.warnings
    );
}

#[test]
fn a_triangle_given_by_link_is_a_ring_with_six_subnets() {
    let p = plan_of("fresh-triangle", &TRIANGLE, &opts(false)).unwrap();
    assert_eq!(p.topology, fabric::FabricTopology::Ring);
    assert_eq!(p.links.len(), 6);
    // Without --link and without a link probe record there is no cabling to plan, and the
    // refusal says it was not recorded (it said "nothing cabled").
    let err = plan_of("fresh-triangle", &[], &opts(false)).unwrap_err();
    assert!(
        err.to_string().contains("cabling was not recorded"),
        "{err}"
    );
}

#[test]
fn seed_001_keeps_its_address_adds_the_twin_and_names_its_netplan_file() {
    let p = plan_of("seed-001-two-sparks-both-twins", &[], &opts(false)).unwrap();
    assert!(p.links[0].kept);
    assert_eq!(p.links[0].subnet.to_string(), "192.168.177.0/24");
    assert_eq!(p.links[1].subnet.to_string(), "192.168.100.0/24");
    assert_eq!(
        p.nodes[0].conflicts[0].describe(),
        "/etc/netplan/40-cx7.yaml configures enP2p1s0f1np1, enp1s0f1np1"
    );
    let refusal = fabric::preflight(&p, false).unwrap_err();
    assert!(refusal.to_string().contains("rerun with --replace"));
    let moves = fabric::preflight(&p, true).unwrap();
    assert_eq!(
        moves[&NodeName::new("spark2").unwrap()],
        vec!["/etc/netplan/40-cx7.yaml"]
    );
}

#[test]
fn a_cable_whose_far_end_is_down_is_refused_naming_both_nodes() {
    let err = plan_of("broken-link-down", &[], &opts(false)).unwrap_err();
    let text = err.to_string();
    // The fixture records no link probe: the cabling is unknown, and said so (
    // item 12; it said "nothing cabled: no fabric port hears another node").
    assert!(text.contains("spark's cabling was not recorded"), "{text}");
    assert!(text.contains("spark2's cabling was not recorded"), "{text}");
}

fn generate(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("etc/netplan");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("40-spark-launch.yaml");
    std::fs::write(&file, text).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let out = Command::new("netplan")
        .args(["generate", "--root-dir"])
        .arg(tmp.path())
        .output()
        .unwrap_or_else(|e| {
            panic!("the real netplan must be installed (apt-get install netplan.io): {e}")
        });
    if !out.status.success() {
        return Err(format!(
            "netplan generate rejected it:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut networks = std::collections::BTreeMap::new();
    let nd = tmp.path().join("run/systemd/network");
    for e in std::fs::read_dir(&nd).map_err(|e| format!("no networkd output: {e}"))? {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "network") {
            let t = std::fs::read_to_string(&p).unwrap();
            // By the interface name it matches, else (matched by MAC) by its file name.
            let name = t
                .lines()
                .find_map(|l| l.strip_prefix("Name="))
                .map(str::to_string)
                .unwrap_or_else(|| p.file_name().unwrap().to_string_lossy().into_owned());
            networks.insert(name, t);
        }
    }
    Ok(networks)
}

#[test]
fn every_planned_netplan_file_is_accepted_by_the_real_netplan_with_its_addresses_and_mtu() {
    let mut checked = 0;
    for (snap, name, given, ll) in CASES {
        let Ok(p) = plan_of(name, given, &opts(ll)) else {
            continue;
        };
        for n in &p.nodes {
            let Some(text) = &n.netplan else { continue };
            let networks =
                generate(text).unwrap_or_else(|e| panic!("{snap} {}: {e}\n{text}", n.name));
            for iface in &n.ifaces {
                let net = networks
                    .get(iface.as_str())
                    .unwrap_or_else(|| panic!("{snap} {}: no .network for {iface}", n.name));
                assert!(
                    net.contains(&format!("MTUBytes={}", p.mtu)),
                    "{snap} {} {iface}: {net}",
                    n.name
                );
                if let Some(a) = n.addresses.get(iface) {
                    assert!(
                        net.contains(&format!("Address={a}")),
                        "{snap} {iface}: {net}"
                    );
                }
            }
            assert_eq!(
                networks.len(),
                n.ifaces.len(),
                "{snap} {}: only the cabled fabric interfaces are configured",
                n.name
            );
            checked += 1;
        }
    }
    assert!(checked >= 10, "only {checked} files checked");
}

#[test]
fn kernel_legal_names_yaml_or_netplan_would_misread_configure_exactly_that_interface() {
    // Seen once: the file wrote names unquoted; `*cx5`, `&cx5`, `'cx5'` and `[cx5]`
    // gave invalid YAML or configured another interface. The fixture's plan, with its
    // interfaces given such names (and a MAC each).
    let p = plan_of("fresh-two-sparks", &[], &opts(false)).unwrap();
    let node = &p.nodes[0];
    let hostile = [
        "*cx5", "&cx5", "'cx5'", "[cx5]", "cx5?", "true", "#cx5", "\"cx5\"", "c\\x5",
    ];
    let mac = |k: usize| format!("02:00:00:00:00:{k:02x}");
    let configs: Vec<fabric::netplan::IfaceConfig> = hostile
        .iter()
        .zip(node.ifaces.iter().cycle())
        .enumerate()
        .map(|(k, (name, real))| fabric::netplan::IfaceConfig {
            iface: NetIf::new(*name),
            address: node.addresses.get(real).copied(),
            link_local_ipv4: false,
            mtu: p.mtu,
            mac: Some(mac(k)),
        })
        .collect();
    let text = fabric::netplan::render(&node.name, &configs);
    let networks = generate(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(networks.len(), hostile.len(), "{networks:#?}");
    for (k, c) in configs.iter().enumerate() {
        let name = c.iface.as_str();
        let matching: Vec<&String> = if c.needs_mac() {
            // networkd would unquote such a name in `Name=`: matched by its MAC instead.
            networks
                .values()
                .filter(|n| n.contains(&format!("MACAddress={}", mac(k))))
                .collect()
        } else {
            // The networkd `Name=` pattern, as the shell's own pattern matching reads it: it
            // matches this name and none of the others.
            networks
                .iter()
                .filter(|(pattern, n)| {
                    n.contains("\nName=")
                        && Command::new("sh")
                            .args(["-c", "case \"$1\" in $2) exit 0;; esac; exit 1", "sh"])
                            .args([name, pattern.as_str()])
                            .status()
                            .unwrap()
                            .success()
                })
                .map(|(_, n)| n)
                .collect()
        };
        assert_eq!(matching.len(), 1, "{name}: {matching:?}\n{text}");
        assert!(matching[0].contains("MTUBytes=9000"), "{name}");
    }
}

#[test]
fn a_file_netplan_rejects_fails_the_check() {
    let bad = "network:\n  version: 2\n  ethernets:\n    eth0:\n      mtu: nine-thousand\n";
    assert!(generate(bad).is_err());
}

#[test]
fn a_ring_plan_names_the_node_whose_two_cables_to_swap() {
    // Seed 003's table joins port 0 to port 0 and port 1 to port 1 on two of its cables.
    for (fixture, given) in [
        ("seed-003-triangle", &[][..]),
        ("fresh-triangle", &TRIANGLE[..]),
    ] {
        let p = plan_of(fixture, given, &opts(false)).unwrap();
        let swap: Vec<&String> = p
            .warnings
            .iter()
            .filter(|w| w.contains("swap its two cables"))
            .collect();
        assert_eq!(swap.len(), 1, "{fixture}: {:?}", p.warnings);
        assert!(
            swap[0].contains("(fix: on iceberg, swap its two cables: the one in enp1s0f0np0 (to titanic) goes into enp1s0f1np1"),
            "{fixture}: {}",
            swap[0]
        );
    }
}
