//! Finds the other boxes on the fast link by browsing mDNS for `_ssh._tcp` (what DGX OS's
//! avahi-daemon publishes), on fabric interfaces only. An effect at the edge: `browse` listens
//! and reports what answered; which interfaces to use (`fabric`) and how answers become one row
//! per node (`group`) and how they read (`render`) are pure and decided elsewhere.
//!
//! Browsing returns as soon as answers settle: after the first answer, it stops once no new
//! node or address has arrived for a short quiet window (mDNS responders answer a query within
//! 20-120 ms), and only waits the whole timeout when nothing answers at all.
//!
//! Next to the mDNS browse, a one-shot query (`dns`) goes out on every browsed interface from
//! an ordinary UDP port: responders must answer it at once by unicast, even those that
//! announced themselves less than a second ago and so stay silent to multicast queries
//! (RFC 6762 §6, §6.7). Without it, nodes that had just booted were missed.

pub mod dns;
pub mod fabric;
pub mod group;
pub mod render;

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::time::{Duration, Instant};

use mdns_sd::{IfKind, IfPredicate, ScopedIp, ServiceDaemon, ServiceEvent};

use crate::probe::facts::NetIf;

pub use fabric::{FabricChoice, InterfaceError, choose_interfaces, sources};
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
    /// Each browsed interface with its IPv4 address: where the one-shot queries go out.
    pub sources: Vec<(NetIf, Ipv4Addr)>,
}

/// The one-shot query is sent again this long after the first (a lost packet costs no node).
const ONE_SHOT_AGAIN: Duration = Duration::from_millis(150);
/// How often the browse loop looks at the one-shot sockets.
const TICK: Duration = Duration::from_millis(10);

/// The default quiet window: longer than an mDNS responder's largest random delay (120 ms)
/// plus a follow-up query for SRV/A records, so a late node is not cut off.
pub const QUIET: Duration = Duration::from_millis(300);

/// One resolved `_ssh._tcp` instance as mDNS reported it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MdnsAnswer {
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
    pub answers: Vec<MdnsAnswer>,
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
    let one_shot = OneShot::open(&opts.sources);

    let hard = crate::clock::later(started, opts.timeout);
    let mut state = Settle {
        answers: Vec::new(),
        last_new: None,
        // On a loaded machine answers arrive later and further apart: the quiet window is
        // never shorter than the time the first peer took to answer.
        quiet: opts.quiet,
        started,
    };
    let mut settled = false;
    let mut sent_again = false;
    loop {
        for a in one_shot.receive() {
            tracing::debug!(
                "{:.3}s one-shot answer {} at {:?}",
                started.elapsed().as_secs_f64(),
                a.instance,
                a.ipv4
            );
            state.heard(a, &opts.local_addresses);
        }
        let now = Instant::now();
        if !sent_again && now >= started + ONE_SHOT_AGAIN {
            one_shot.send();
            sent_again = true;
        }
        let until = match state.last_new {
            Some(t) => (t + state.quiet).min(hard),
            None => hard,
        };
        if now >= until {
            settled = state.last_new.is_some() && now < hard;
            break;
        }
        let wait = if one_shot.is_empty() {
            until - now
        } else {
            (until - now).min(TICK)
        };
        match rx.recv_timeout(wait) {
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
                state.heard(
                    MdnsAnswer {
                        // Names from the network: printable, never raw control characters.
                        instance: crate::text::printable(&s.fullname).into_owned(),
                        host: crate::text::printable(&s.host).into_owned(),
                        port: s.port,
                        ipv4,
                    },
                    &opts.local_addresses,
                );
            }
            Ok(other) => {
                tracing::debug!("{:.3}s {other:?}", started.elapsed().as_secs_f64());
            }
            Err(mdns_sd::RecvTimeoutError::Timeout) => {}
            Err(mdns_sd::RecvTimeoutError::Disconnected) => break,
        }
    }
    let answers = state.answers;
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

/// What has been heard so far and when the last news came.
struct Settle {
    answers: Vec<MdnsAnswer>,
    last_new: Option<Instant>,
    quiet: Duration,
    started: Instant,
}

impl Settle {
    /// Takes one answer in; news from a peer (or any news after that) restarts the quiet
    /// window. This machine's own answer does not start it.
    fn heard(&mut self, answer: MdnsAnswer, local: &[Ipv4Addr]) {
        let from_peer = answer.ipv4.iter().any(|(ip, _)| !local.contains(ip));
        let new = merge(&mut self.answers, answer);
        if new && (from_peer || self.last_new.is_some()) {
            if self.last_new.is_none() {
                self.quiet = self.quiet.max(self.started.elapsed());
            }
            self.last_new = Some(Instant::now());
        }
    }
}

/// One non-blocking UDP socket per browsed interface, bound to its address on an ordinary
/// port, for the one-shot queries. An interface whose socket cannot be opened is left to the
/// mDNS browse alone (with a debug line).
struct OneShot {
    id: u16,
    sockets: Vec<(NetIf, UdpSocket)>,
}

impl OneShot {
    fn open(sources: &[(NetIf, Ipv4Addr)]) -> OneShot {
        let id = (std::process::id() as u16)
            ^ (std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as u16)
                .unwrap_or(0));
        let mut sockets = Vec::new();
        for (iface, addr) in sources {
            match one_shot_socket(*addr) {
                Ok(s) => sockets.push((iface.clone(), s)),
                Err(e) => tracing::debug!("no one-shot mDNS query on {iface} ({addr}): {e}"),
            }
        }
        let o = OneShot { id, sockets };
        o.send();
        o
    }

    fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }

    fn send(&self) {
        let q = dns::query(self.id);
        let group = SocketAddrV4::new(Ipv4Addr::new(224, 0, 0, 251), 5353);
        for (iface, s) in &self.sockets {
            if let Err(e) = s.send_to(&q, group) {
                tracing::debug!("one-shot mDNS query on {iface}: {e}");
            }
        }
    }

    /// Every answer waiting on the sockets.
    fn receive(&self) -> Vec<MdnsAnswer> {
        let mut out = Vec::new();
        let mut buf = [0u8; 9000];
        for (iface, s) in &self.sockets {
            while let Ok((n, _)) = s.recv_from(&mut buf) {
                out.extend(dns::answers(&buf[..n], self.id, iface));
            }
        }
        out
    }
}

fn one_shot_socket(addr: Ipv4Addr) -> std::io::Result<UdpSocket> {
    let s = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::DGRAM,
        Some(socket2::Protocol::UDP),
    )?;
    s.bind(&SocketAddrV4::new(addr, 0).into())?;
    s.set_multicast_if_v4(&addr)?;
    s.set_multicast_ttl_v4(255)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Adds an answer or the new addresses/interfaces it brings; true when anything was new.
fn merge(answers: &mut Vec<MdnsAnswer>, a: MdnsAnswer) -> bool {
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

    fn ans(instance: &str, ips: &[(&str, &[&str])]) -> MdnsAnswer {
        MdnsAnswer {
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
