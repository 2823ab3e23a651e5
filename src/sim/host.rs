//! What `sim up` and `sim down` read about this machine before deciding anything
//! ([`MachineFacts`]): whether this is root, which programs are installed, the sims recorded
//! under the sims' folder, the network namespaces and interfaces that exist, the networks
//! routed here, and the limits a Docker Engine started from here can give its containers.
//! Read-only.

use std::path::Path;

use ipnet::Ipv4Net;

use super::plan::{
    HostLimits, MachineFacts, PREREQUISITES, Prerequisite, RECORD, SIM_ROOT, SimRecord, nodes_root,
};

/// Held while a `sim` command chooses names and networks and claims them, or removes the
/// sims' root: two `sim up` at once never take the same network, and a `sim down` never
/// removes the root another is making a sim in. An advisory lock on the root's parent folder
/// (which is never removed), released when dropped.
pub struct SimLock(#[allow(dead_code)] std::fs::File);

/// Waits for the lock.
pub async fn lock() -> std::io::Result<SimLock> {
    tokio::task::spawn_blocking(|| {
        use std::os::fd::AsRawFd as _;
        let parent = Path::new(SIM_ROOT).parent().unwrap_or(Path::new("/"));
        let dir = std::fs::File::open(parent)?;
        // SAFETY: flock on a descriptor this function owns; it blocks until the lock is held.
        if unsafe { libc::flock(dir.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(SimLock(dir))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The largest record read.
const RECORD_MAX: crate::input::InputLimit = crate::input::InputLimit {
    max: 1 << 20,
    hint: "a simulated cluster's record is a few hundred bytes",
};

/// Everything [`MachineFacts`] holds, read now.
pub fn read() -> MachineFacts {
    let (sims, folders) = sims();
    MachineFacts {
        root: nix::unistd::geteuid().is_root(),
        missing: PREREQUISITES
            .iter()
            .filter(|p| !installed(p))
            .copied()
            .collect(),
        sims,
        namespaces: names_in(Path::new("/run/netns")),
        interfaces: names_in(Path::new("/sys/class/net")),
        routes: routes(),
        folders,
        limits: limits(),
    }
}

/// Whether `p` is an executable file (an absolute path, or a name on `PATH`).
fn installed(p: &Prerequisite) -> bool {
    if p.program.starts_with('/') {
        return executable(Path::new(p.program));
    }
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| executable(&dir.join(p.program)))
    })
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The entries of a folder, by name (none when it cannot be read).
fn names_in(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The sims recorded under [`SIM_ROOT`], and every folder there (`NAME`, `nodes/PREFIX`).
fn sims() -> (Vec<SimRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut folders = Vec::new();
    for name in names_in(Path::new(SIM_ROOT)) {
        if name == "nodes" {
            continue;
        }
        if let Some(r) = record(&Path::new(SIM_ROOT).join(&name).join(RECORD)) {
            records.push(r);
        }
        folders.push(name);
    }
    for prefix in names_in(&nodes_root()) {
        folders.push(format!("nodes/{prefix}"));
    }
    (records, folders)
}

/// A sim's record, when it is readable.
pub fn record(path: &Path) -> Option<SimRecord> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.file_type().is_file() {
        return None;
    }
    let text = crate::input::read_text(path, RECORD_MAX).ok()?;
    serde_json::from_str(&text).ok()
}

/// The IPv4 networks of the main routing table, the default route left out
/// (`/proc/net/route`: destination and mask as little-endian hex).
fn routes() -> Vec<Ipv4Net> {
    let text = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    parse_routes(&text)
}

fn parse_routes(text: &str) -> Vec<Ipv4Net> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let dst = u32::from_str_radix(cols.get(1)?, 16).ok()?;
            let mask = u32::from_str_radix(cols.get(7)?, 16).ok()?;
            if mask == 0 {
                return None;
            }
            let addr = std::net::Ipv4Addr::from(dst.to_le_bytes());
            Ipv4Net::new(addr, mask.count_ones() as u8).ok()
        })
        .collect()
}

/// Whether this process holds `CAP_SYS_RESOURCE`, and its hard memlock and nofile limits.
fn limits() -> HostLimits {
    const CAP_SYS_RESOURCE: u32 = 24;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let sys_resource = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_RESOURCE) != 0);
    HostLimits {
        sys_resource,
        memlock_hard: hard_limit(libc::RLIMIT_MEMLOCK),
        nofile_hard: hard_limit(libc::RLIMIT_NOFILE),
    }
}

/// A hard resource limit (`None`: unlimited or unreadable).
fn hard_limit(resource: libc::__rlimit_resource_t) -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct given; nothing else is touched.
    let rc = unsafe { libc::getrlimit(resource, &mut lim) };
    (rc == 0 && lim.rlim_max != libc::RLIM_INFINITY).then_some(lim.rlim_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_read_from_the_kernels_table_without_the_default() {
        // /proc/net/route as this machine printed it.
        let text = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n\
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n";
        let routes = parse_routes(text);
        assert_eq!(
            routes,
            vec![
                "172.17.0.0/16".parse::<Ipv4Net>().unwrap(),
                "192.0.2.0/24".parse().unwrap()
            ]
        );
    }
}
