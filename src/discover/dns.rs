//! The few bytes of DNS that a one-shot ("legacy unicast", RFC 6762 §6.7) mDNS query needs: the
//! query for `_ssh._tcp.local` PTR, and the reader of the unicast replies (PTR → instance, SRV →
//! host and port, A → addresses) into [`MdnsAnswer`]s. Pure: bytes in, answers out; the socket is
//! `discover::browse`'s.
//!
//! Why a one-shot query next to the mDNS browse: a responder never multicasts a record within a
//! second of multicasting it (RFC 6762 §6), so peers that just announced themselves (booted a
//! moment ago) stay silent to an ordinary query. A query sent from a port other than 5353 must
//! be answered at once by unicast, rate limit or not, with every record in the answer section.
//!
//! The reader is bounded: at most [`MAX_RECORDS`] records per packet, names of at most 255
//! bytes reached through at most [`MAX_POINTERS`] compression pointers; anything malformed ends
//! the packet, never a panic.

use std::net::Ipv4Addr;

use super::MdnsAnswer;
use crate::probe::facts::NetIf;

/// The service name queried, as labels.
const SERVICE_LABELS: [&str; 3] = ["_ssh", "_tcp", "local"];
const TYPE_A: u16 = 1;
const TYPE_PTR: u16 = 12;
const TYPE_SRV: u16 = 33;
const CLASS_IN: u16 = 1;
/// Records read from one packet at most (a reply carries a handful).
pub const MAX_RECORDS: usize = 256;
/// Compression pointers followed per name at most.
pub const MAX_POINTERS: usize = 32;

/// A one-shot PTR query for `_ssh._tcp.local` with transaction id `id`.
pub fn query(id: u16) -> Vec<u8> {
    let mut p = Vec::with_capacity(40);
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(&[0, 0]); // flags: a standard query
    p.extend_from_slice(&1u16.to_be_bytes()); // one question
    p.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // no answers, authority, additional
    for l in SERVICE_LABELS {
        p.push(l.len() as u8);
        p.extend_from_slice(l.as_bytes());
    }
    p.push(0);
    p.extend_from_slice(&TYPE_PTR.to_be_bytes());
    p.extend_from_slice(&CLASS_IN.to_be_bytes());
    p
}

/// One resource record this reader understands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Record {
    Ptr {
        name: String,
        target: String,
    },
    Srv {
        name: String,
        target: String,
        port: u16,
    },
    A {
        name: String,
        addr: Ipv4Addr,
    },
}

/// The `_ssh._tcp` instances a reply to [`query`] with id `id` describes, each with the
/// addresses its SRV host has in the reply, seen on `iface`. A reply with another id, a
/// query, or bytes that are not DNS give nothing.
pub fn answers(packet: &[u8], id: u16, iface: &NetIf) -> Vec<MdnsAnswer> {
    let records = match records(packet, id) {
        Some(r) => r,
        None => return Vec::new(),
    };
    let service = format!("{}.", SERVICE_LABELS.join("."));
    let mut out: Vec<MdnsAnswer> = Vec::new();
    for r in &records {
        let Record::Ptr { name, target } = r else {
            continue;
        };
        if !name.eq_ignore_ascii_case(&service) || out.iter().any(|a| &a.instance == target) {
            continue;
        }
        let srv = records.iter().find_map(|s| match s {
            Record::Srv {
                name,
                target: host,
                port,
            } if name.eq_ignore_ascii_case(target) => Some((host.clone(), *port)),
            _ => None,
        });
        let Some((host, port)) = srv else { continue };
        let mut ipv4: Vec<(Ipv4Addr, Vec<NetIf>)> = Vec::new();
        for a in &records {
            if let Record::A { name, addr } = a
                && name.eq_ignore_ascii_case(&host)
                && !ipv4.iter().any(|(x, _)| x == addr)
            {
                ipv4.push((*addr, vec![iface.clone()]));
            }
        }
        if ipv4.is_empty() {
            continue;
        }
        ipv4.sort();
        out.push(MdnsAnswer {
            instance: target.clone(),
            host,
            port,
            ipv4,
        });
    }
    out
}

fn u16_at(p: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*p.get(at)?, *p.get(at + 1)?]))
}

/// Every record of a response with id `id`, or `None` when the packet is not one.
fn records(p: &[u8], id: u16) -> Option<Vec<Record>> {
    if u16_at(p, 0)? != id {
        return None;
    }
    let flags = u16_at(p, 2)?;
    if flags & 0x8000 == 0 {
        return None; // a query, not a response
    }
    let qd = usize::from(u16_at(p, 4)?);
    let total =
        usize::from(u16_at(p, 6)?) + usize::from(u16_at(p, 8)?) + usize::from(u16_at(p, 10)?);
    let mut at = 12;
    for _ in 0..qd.min(MAX_RECORDS) {
        let (_, next) = name(p, at)?;
        at = next.checked_add(4)?;
    }
    let mut out = Vec::new();
    for _ in 0..total.min(MAX_RECORDS) {
        let Some((owner, next)) = name(p, at) else {
            break;
        };
        let (Some(rtype), Some(class), Some(len)) =
            (u16_at(p, next), u16_at(p, next + 2), u16_at(p, next + 8))
        else {
            break;
        };
        let data = next + 10;
        let end = data + usize::from(len);
        if end > p.len() {
            break;
        }
        // The top bit of the class is mDNS's cache-flush bit.
        if class & 0x7fff == CLASS_IN {
            match rtype {
                TYPE_PTR => {
                    if let Some((target, _)) = name(p, data) {
                        out.push(Record::Ptr {
                            name: owner,
                            target,
                        });
                    }
                }
                TYPE_SRV if len >= 7 => {
                    if let (Some(port), Some((target, _))) =
                        (u16_at(p, data + 4), name(p, data + 6))
                    {
                        out.push(Record::Srv {
                            name: owner,
                            target,
                            port,
                        });
                    }
                }
                TYPE_A if len == 4 => out.push(Record::A {
                    name: owner,
                    addr: Ipv4Addr::new(p[data], p[data + 1], p[data + 2], p[data + 3]),
                }),
                _ => {}
            }
        }
        at = end;
    }
    Some(out)
}

/// The (possibly compressed) name at `at`, dotted with a trailing dot, and the offset after it
/// in the packet. Labels are kept as printable ASCII (anything else becomes `?`).
fn name(p: &[u8], mut at: usize) -> Option<(String, usize)> {
    let mut out = String::new();
    let mut after: Option<usize> = None;
    let mut jumps = 0;
    loop {
        let len = *p.get(at)?;
        match len & 0xc0 {
            0x00 if len == 0 => {
                if out.is_empty() {
                    out.push('.');
                }
                return Some((out, after.unwrap_or(at + 1)));
            }
            0x00 => {
                let label = p.get(at + 1..at + 1 + usize::from(len))?;
                if out.len() + label.len() + 1 > 255 {
                    return None;
                }
                out.extend(label.iter().map(|&b| {
                    if b.is_ascii_graphic() {
                        char::from(b)
                    } else {
                        '?'
                    }
                }));
                out.push('.');
                at += 1 + usize::from(len);
            }
            0xc0 => {
                jumps += 1;
                if jumps > MAX_POINTERS {
                    return None;
                }
                let target = usize::from(u16_at(p, at)? & 0x3fff);
                after.get_or_insert(at + 2);
                at = target;
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as avahi-daemon sends it to a one-shot query (captured on simulated nodes:
    /// PTR, SRV, TXT, A and AAAA, all in the answer section, with name compression).
    fn reply(id: u16, host: &str, addr: [u8; 4]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&0x8400u16.to_be_bytes());
        p.extend_from_slice(&[0, 1, 0, 3, 0, 0, 0, 0]);
        // question: _ssh._tcp.local PTR IN at offset 12
        p.extend_from_slice(b"\x04_ssh\x04_tcp\x05local\x00\x00\x0c\x00\x01");
        // PTR: owner -> pointer to 12; target: <host> + pointer to 12
        p.extend_from_slice(&[0xc0, 12, 0, 12, 0, 1, 0, 0, 0x11, 0x94]);
        let instance_at = p.len() + 2;
        let rdata = {
            let mut r = vec![host.len() as u8];
            r.extend_from_slice(host.as_bytes());
            r.extend_from_slice(&[0xc0, 12]);
            r
        };
        p.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
        p.extend_from_slice(&rdata);
        // SRV: owner -> the instance; target <host>.local (pointer to "local" at 12+10)
        p.extend_from_slice(&[0xc0, instance_at as u8, 0, 33, 0x80, 1, 0, 0, 0, 120]);
        let host_at = p.len() + 2 + 6;
        let mut srv = vec![0, 0, 0, 0, 0, 22, host.len() as u8];
        srv.extend_from_slice(host.as_bytes());
        srv.extend_from_slice(&[0xc0, 22]);
        p.extend_from_slice(&(srv.len() as u16).to_be_bytes());
        p.extend_from_slice(&srv);
        // A: owner -> the host name
        p.extend_from_slice(&[0xc0, host_at as u8, 0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4]);
        p.extend_from_slice(&addr);
        p
    }

    #[test]
    fn a_one_shot_reply_gives_the_instance_its_host_port_and_address() {
        let iface = NetIf::new("enp1s0f1np1");
        let got = answers(&reply(7, "spark-b", [169, 254, 100, 2]), 7, &iface);
        assert_eq!(
            got,
            vec![MdnsAnswer {
                instance: "spark-b._ssh._tcp.local.".into(),
                host: "spark-b.local.".into(),
                port: 22,
                ipv4: vec![(Ipv4Addr::new(169, 254, 100, 2), vec![iface])],
            }]
        );
    }

    #[test]
    fn the_query_asks_for_ssh_tcp_local_ptr() {
        let q = query(0x1234);
        assert_eq!(&q[..4], &[0x12, 0x34, 0, 0]);
        assert_eq!(&q[12..], b"\x04_ssh\x04_tcp\x05local\x00\x00\x0c\x00\x01");
    }

    #[test]
    fn another_id_a_query_or_garbage_gives_nothing() {
        let iface = NetIf::new("x");
        let r = reply(7, "spark-b", [169, 254, 100, 2]);
        assert!(answers(&r, 8, &iface).is_empty());
        assert!(answers(&query(7), 7, &iface).is_empty());
        assert!(answers(&[], 7, &iface).is_empty());
        // Every truncation of a valid reply is read without a panic.
        for n in 0..r.len() {
            let _ = answers(&r[..n], 7, &iface);
        }
    }

    #[test]
    fn a_pointer_loop_ends_the_name_instead_of_spinning() {
        let mut p = vec![0, 7, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        p.extend_from_slice(&[0xc0, 12]); // owner points at itself
        p.extend_from_slice(&[0, 12, 0, 1, 0, 0, 0, 0, 0, 2, 0xc0, 12]);
        assert!(answers(&p, 7, &NetIf::new("x")).is_empty());
        assert_eq!(name(&p, 12), None);
    }
}
