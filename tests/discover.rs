//! `spark-launch discover` against real avahi-daemons on simulated nodes: every node is found
//! once with its fabric address and the interface it was seen on, services on the management
//! network are ignored, no answer is exit 1 with a message that helps, and `--save` fills the
//! cluster file.

mod support;

use support::{SimNet, describe, stderr};

fn discover_json(net: &SimNet, node: usize, extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec!["discover", "--json"];
    args.extend_from_slice(extra);
    let out = net.spark_launch(node, &args);
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", describe(&out)));
    (v, stderr(&out))
}

/// `(name, [(ip, interface)], local)` of one node.
type Row = (String, Vec<(String, String)>, bool);

/// Every node's row, in output order.
fn rows(v: &serde_json::Value) -> Vec<Row> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_string(),
                n["addresses"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| {
                        (
                            a["ip"].as_str().unwrap().to_string(),
                            a["interface"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
                n["local"].as_bool().unwrap(),
            )
        })
        .collect()
}

fn expected(net: &SimNet, nodes: &[usize], local: usize) -> Vec<Row> {
    let mut want: Vec<_> = nodes
        .iter()
        .map(|&i| {
            (
                net.hostname(i),
                vec![(net.fabric_addr(i).to_string(), "enp1s0f1np1".to_string())],
                i == local,
            )
        })
        .collect();
    want.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    want
}

#[test]
fn discovery_of_two_nodes_finds_each_once_with_its_fabric_address_and_interface() {
    let net = SimNet::builder(2).services("avahi").up();
    let (v, _) = discover_json(&net, 1, &[]);
    assert_eq!(rows(&v), expected(&net, &[1, 2], 1));
    assert_eq!(
        v[1]["fqdn"].as_str().unwrap(),
        format!("{}.local.", net.hostname(2))
    );
}

#[test]
fn discovery_of_four_nodes_finds_each_once_from_any_node() {
    let net = SimNet::builder(4).services("avahi").up();
    let (v, _) = discover_json(&net, 3, &[]);
    assert_eq!(rows(&v), expected(&net, &[1, 2, 3, 4], 3));
    // The text table has one row per node, this machine marked. (Responders do not multicast a
    // record twice within a second, so a second browse right after the first is spaced out.)
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = net.spark_launch(1, &["discover"]);
    assert!(out.status.success(), "{}", describe(&out));
    let text = support::stdout(&out);
    for i in 1..=4 {
        assert_eq!(text.matches(&net.hostname(i)).count(), 1, "{text}");
    }
    assert_eq!(text.matches("this machine").count(), 1, "{text}");
}

#[test]
fn discovery_right_after_eight_nodes_booted_finds_all_eight_every_time() {
    // Seen once: right after the avahi-daemons start, peers that multicast their records less
    // than a second ago stay silent to multicast queries (RFC 6762 §6), and the browse stopped
    // after 0.3 s of quiet with 2 to 7 of the 8 nodes. The same happens to a browse right
    // after another one (the first one's answers were multicast). Three browses back to back,
    // from the moment the daemons are up, must each find all eight.
    let net = SimNet::builder(8).services("avahi").cold().up();
    let want = expected(&net, &(1..=8).collect::<Vec<_>>(), 1);
    for run in 1..=3 {
        let (v, _) = discover_json(&net, 1, &[]);
        assert_eq!(rows(&v), want, "run {run}: {v}");
    }
}

#[test]
fn discovery_ignores_services_on_non_fabric_interfaces() {
    // Node 3 is on the management network only; nodes 1 and 2 are on both.
    let net = SimNet::builder(3).services("avahi").mgmt_only(&[3]).up();
    let (v, _) = discover_json(&net, 1, &[]);
    assert_eq!(rows(&v), expected(&net, &[1, 2], 1));
    assert!(!v.to_string().contains("10.231."), "{v}");
    // Widening to every interface shows node 3 and the management addresses.
    let (all, _) = discover_json(&net, 1, &["--all-interfaces"]);
    let names: Vec<String> = rows(&all).into_iter().map(|r| r.0).collect();
    assert!(names.contains(&net.hostname(3)), "{all}");
    assert!(all.to_string().contains("10.231.0.2"), "{all}");
}

#[test]
fn discovery_with_no_peers_exits_1_naming_the_interfaces_browsed_and_the_likely_causes() {
    let net = SimNet::builder(2).services("avahi").up();
    net.stop(2, "avahi");
    let out = net.spark_launch(1, &["discover", "--timeout", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("no other node answered mDNS (_ssh._tcp) on enp1s0f1np1 (169.254.100.1/16)"),
        "{err}"
    );
    for cause in ["cable", "avahi-daemon is not running", "UDP port 5353"] {
        assert!(err.contains(cause), "missing {cause:?} in {err}");
    }
    assert!(support::stdout(&out).is_empty(), "{}", describe(&out));
}

#[test]
fn discover_save_writes_every_node_into_the_cluster_file_this_machine_first() {
    let net = SimNet::builder(3).services("avahi").up();
    let out = net.spark_launch(2, &["discover", "--save"]);
    assert!(out.status.success(), "{}", describe(&out));
    let file = net.home(2).join(".config/spark-launch/cluster.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("- name: "))
        .collect();
    assert_eq!(
        names,
        vec![
            net.hostname(2).as_str(),
            net.hostname(1).as_str(),
            net.hostname(3).as_str()
        ],
        "{text}"
    );
    assert!(
        text.contains(&format!("  - {}", net.fabric_addr(3))),
        "{text}"
    );
    // A second save changes nothing and says so.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let out = net.spark_launch(2, &["discover", "--save"]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        stderr(&out).contains("nothing changed"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let out = net.spark_launch(2, &["nodes"]);
    assert!(
        support::stdout(&out).contains(&net.hostname(3)),
        "{}",
        describe(&out)
    );
}
