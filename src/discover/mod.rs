//! Finds the other boxes on the fast link by browsing mDNS for `_ssh._tcp` (what DGX OS's
//! avahi-daemon publishes), on fabric interfaces only. An effect at the edge: `browse` listens
//! and reports what answered; which interfaces to use (`fabric`) and how answers become one row
//! per node (`group`) are pure and decided elsewhere.
//!
//! Browsing returns as soon as answers settle: after the first answer, it stops once no new
//! node or address has arrived for a short quiet window (mDNS responders answer a query within
//! 20-120 ms), and only waits the whole timeout when nothing answers at all.

pub mod fabric;
pub mod group;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use mdns_sd::{IfKind, IfPredicate, ScopedIp, ServiceDaemon, ServiceEvent};

use crate::probe::facts::NetIf;

pub use fabric::{FabricChoice, InterfaceError, choose_interfaces};
pub use group::{DiscoveredNode, FoundAddress, group};

/// The service DGX OS publishes for every node.
pub const SERVICE: &str = "_ssh._tcp.local.";

/// How to browse.
#[derive(Clone, Debug)]
pub struct BrowseOptions {
    /// Only answers received on these interfaces count.
    pub interfaces: Vec<NetIf>,
    /// Give up after this long when nothing answers.
    pub timeout: Duration,
    /// Stop once no new answer arrived for this long (after the first one from another node).
    pub quiet: Duration,
    /// This machine's addresses: its own answer does not start the quiet window, because
    /// peers that multicast their answer less than a second ago stay silent until the second
    /// query (RFC 6762 §6), while this machine's responder may answer at once.
    pub local_addresses: Vec<Ipv4Addr>,
}

/// The default quiet window: longer than an mDNS responder's largest random delay (120 ms)
/// plus a follow-up query for SRV/A records, so a late node is not cut off.
pub const QUIET: Duration = Duration::from_millis(300);

/// One resolved `_ssh._tcp` instance as mDNS reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The instance name (`spark-1d84._ssh._tcp.local.`).
    pub instance: String,
    /// The SRV target (`spark-1d84.local.`).
    pub host: String,
    pub port: u16,
    /// IPv4 addresses with the local interfaces each was seen on.
    pub ipv4: Vec<(Ipv4Addr, Vec<NetIf>)>,
}

/// What a browse heard.
#[derive(Clone, Debug)]
pub struct Heard {
    pub answers: Vec<Answer>,
    /// How long the browse took.
    pub took: Duration,
    /// True when it stopped because answers settled (not because of the timeout).
    pub settled: bool,
}

/// Browsing could not start.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("cannot start mDNS on this machine: {0} (is UDP port 5353 usable here?)")]
    Daemon(#[source] mdns_sd::Error),
}

/// Browses `_ssh._tcp` on the given interfaces (blocking; call it from `spawn_blocking`).
pub fn browse(opts: &BrowseOptions) -> Result<Heard, DiscoverError> {
    let started = Instant::now();
    let daemon = ServiceDaemon::new().map_err(DiscoverError::Daemon)?;
    let names: Vec<String> = opts.interfaces.iter().map(|n| n.to_string()).collect();
    let allowed = names.clone();
    daemon
        .disable_interface(IfKind::All)
        .map_err(DiscoverError::Daemon)?;
    daemon
        .enable_interface(IfKind::Predicate(IfPredicate::new(move |i| {
            i.ip().is_ipv4() && allowed.iter().any(|n| n == &i.name)
        })))
        .map_err(DiscoverError::Daemon)?;
    let rx = daemon.browse(SERVICE).map_err(DiscoverError::Daemon)?;

    let hard = started + opts.timeout;
    let mut answers: Vec<Answer> = Vec::new();
    let mut last_new: Option<Instant> = None;
    // On a loaded machine answers arrive later and further apart: the quiet window is never
    // shorter than the time the first peer took to answer.
    let mut quiet = opts.quiet;
    let mut settled = false;
    loop {
        let now = Instant::now();
        let until = match last_new {
            Some(t) => (t + quiet).min(hard),
            None => hard,
        };
        if now >= until {
            settled = last_new.is_some() && now < hard;
            break;
        }
        match rx.recv_timeout(until - now) {
            Ok(ServiceEvent::ServiceResolved(s)) => {
                tracing::debug!(
                    "{:.3}s resolved {} at {:?}",
                    started.elapsed().as_secs_f64(),
                    s.fullname,
                    s.get_addresses()
                );
                let mut ipv4: Vec<(Ipv4Addr, Vec<NetIf>)> = Vec::new();
                for a in s.get_addresses() {
                    if let ScopedIp::V4(v4) = a {
                        let ifs: Vec<NetIf> = v4
                            .interface_ids()
                            .iter()
                            .filter(|id| names.contains(&id.name))
                            .map(|id| NetIf::new(id.name.clone()))
                            .collect();
                        if !ifs.is_empty() {
                            ipv4.push((*v4.addr(), ifs));
                        }
                    }
                }
                if ipv4.is_empty() {
                    continue;
                }
                ipv4.sort();
                let from_peer = ipv4
                    .iter()
                    .any(|(ip, _)| !opts.local_addresses.contains(ip));
                let answer = Answer {
                    instance: s.fullname.clone(),
                    host: s.host.clone(),
                    port: s.port,
                    ipv4,
                };
                let new = merge(&mut answers, answer);
                if new && (from_peer || last_new.is_some()) {
                    if last_new.is_none() {
                        quiet = quiet.max(started.elapsed());
                    }
                    last_new = Some(Instant::now());
                }
            }
            Ok(other) => {
                tracing::debug!("{:.3}s {other:?}", started.elapsed().as_secs_f64());
            }
            Err(mdns_sd::RecvTimeoutError::Timeout) => {}
            Err(mdns_sd::RecvTimeoutError::Disconnected) => break,
        }
    }
    let took = started.elapsed();
    if let Ok(done) = daemon.shutdown() {
        let _ = done.recv_timeout(Duration::from_millis(500));
    }
    Ok(Heard {
        answers,
        took,
        settled,
    })
}

/// Adds an answer or the new addresses/interfaces it brings; true when anything was new.
fn merge(answers: &mut Vec<Answer>, a: Answer) -> bool {
    let Some(known) = answers.iter_mut().find(|k| k.instance == a.instance) else {
        answers.push(a);
        return true;
    };
    let mut new = false;
    for (ip, ifs) in a.ipv4 {
        match known.ipv4.iter_mut().find(|(k, _)| *k == ip) {
            Some((_, kifs)) => {
                for i in ifs {
                    if !kifs.contains(&i) {
                        kifs.push(i);
                        new = true;
                    }
                }
            }
            None => {
                known.ipv4.push((ip, ifs));
                new = true;
            }
        }
    }
    known.ipv4.sort();
    if known.host != a.host {
        known.host = a.host;
        new = true;
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ans(instance: &str, ips: &[(&str, &[&str])]) -> Answer {
        Answer {
            instance: instance.into(),
            host: format!("{}.local.", instance.split('.').next().unwrap()),
            port: 22,
            ipv4: ips
                .iter()
                .map(|(ip, ifs)| {
                    (
                        ip.parse().unwrap(),
                        ifs.iter().map(|i| NetIf::new(*i)).collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn a_repeated_answer_is_not_news_but_a_new_address_or_interface_is() {
        let mut all = Vec::new();
        assert!(merge(
            &mut all,
            ans("a._ssh._tcp.local.", &[("169.254.1.1", &["if0"])])
        ));
        assert!(!merge(
            &mut all,
            ans("a._ssh._tcp.local.", &[("169.254.1.1", &["if0"])])
        ));
        assert!(merge(
            &mut all,
            ans("a._ssh._tcp.local.", &[("169.254.1.1", &["if1"])])
        ));
        assert!(merge(
            &mut all,
            ans("a._ssh._tcp.local.", &[("169.254.2.1", &["if1"])])
        ));
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].ipv4.len(), 2);
        assert!(merge(
            &mut all,
            ans("b._ssh._tcp.local.", &[("169.254.1.2", &["if0"])])
        ));
        assert_eq!(all.len(), 2);
    }
}
