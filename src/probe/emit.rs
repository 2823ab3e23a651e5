//! The snapshot emitter: a POSIX shell script that prints a node's snapshot as a stream (see
//! `tree`). The same script runs on the local machine (`probe`, `probe --capture`) and on
//! remote nodes over SSH, and its output goes through the same reader as a snapshot folder.
//!
//! It only reads: sysfs, procfs (including the NVIDIA driver's GPU list), `/dev/infiniband`,
//! `/etc/nccl.conf`, `ip -j addr/route`. On the live machine it also writes `recorded`, the
//! list of what it looked at ([`RECORDED_PATHS`], less the commands that could not run: without
//! `ip` on `PATH` neither `ip-addr.json` nor `ip-route.json` is claimed), and `dev/infiniband`
//! as a folder even when empty or missing, so a reader can tell "not there" from "not looked
//! at". With `SL_ROOT=DIR`
//! set it reads a snapshot folder instead of the live machine (tests use that to prove the
//! emitter covers every path the reader needs), copying that snapshot's own `recorded` list, and
//! relays what the link probe (`link_emit`) and the read of the node's own NCCL
//! (`host-nccl.json`, written by spark-launch after this script, not by it) recorded there
//! (`links/`, `etc/netplan/`), so a snapshot streams whole. It needs only `sh`, `sed`, `cat` and
//! `ip` (iproute2), all present on DGX OS and on every distribution with RDMA support; it uses
//! `read` rather than `cat` for single-line files, so the hundreds of GID slots cost no forks.

/// What a live capture looks at, as snapshot paths: the `recorded` list it writes. A path here
/// that the snapshot lacks was observed absent.
pub const RECORDED_PATHS: &[&str] = &[
    "hostname",
    "arch",
    "ip-addr.json",
    "ip-route.json",
    "ulimit-l",
    "proc/sys/kernel/osrelease",
    "proc/meminfo",
    "sys/module/nvidia",
    "etc/nccl.conf",
    "proc/driver/nvidia/gpus",
    "dev/infiniband",
    "sys/class/net",
    "sys/class/infiniband",
];

/// The emitter script. Run it with `sh -c`.
pub const SCRIPT: &str = r#"
R="${SL_ROOT:-}"
echo '#spark-launch-snapshot 1'
# one-line file: '@path' + '|value', or '!path' when it exists but cannot be read
e1() {
  [ -e "$R/$1" ] || return 0
  v=
  if { IFS= read -r v || [ -n "$v" ]; } < "$R/$1" 2>/dev/null; then
    printf '@%s\n|%s\n' "$1" "$v"
  else
    printf '!%s\n' "$1"
  fi
}
# multi-line file
em() {
  [ -e "$R/$1" ] || return 0
  if v=$(cat "$R/$1" 2>/dev/null); then
    printf '@%s\n' "$1"; printf '%s\n' "$v" | sed 's/^/|/'
  else
    printf '!%s\n' "$1"
  fi
}
# command output stored as a file; fails (and stores nothing) when the command does
ec() {
  if v=$(eval "$2" 2>/dev/null); then
    printf '@%s\n' "$1"; printf '%s\n' "$v" | sed 's/^/|/'
  else
    return 1
  fi
}
if [ -n "$R" ]; then
  e1 hostname; e1 arch; em ip-addr.json; em ip-route.json; e1 ulimit-l; em recorded
  # What the probe read of the node's own NCCL (runtime/host_nccl.rs), relayed likewise.
  em host-nccl.json
  [ -d "$R/dev/infiniband" ] && printf '+dev/infiniband\n'
  # What the link probe (link_emit.rs) recorded live, relayed so a snapshot streams whole.
  if [ -e "$R/links/probe" ]; then
    e1 links/probe
    for f in "$R"/links/*/*; do [ -f "$f" ] && em "${f#"$R"/}"; done
  fi
  if [ -d "$R/etc/netplan" ]; then
    printf '+etc/netplan\n'
    for f in "$R"/etc/netplan/*.yaml; do [ -e "$f" ] && em "etc/netplan/${f##*/}"; done
  fi
else
  # A command that could not run (no `ip` on a minimal image) recorded nothing: it is left
  # out of `recorded`, so its facts read as not recorded, never as absent.
  nr=
  ec hostname 'cat /proc/sys/kernel/hostname' || nr="$nr hostname"
  ec arch 'uname -m' || nr="$nr arch"
  ec ip-addr.json 'ip -j addr show' || nr="$nr ip-addr.json"
  ec ip-route.json 'ip -j route show' || nr="$nr ip-route.json"
  ec ulimit-l 'ulimit -l' || nr="$nr ulimit-l"
  printf '@recorded\n'
  for p in hostname arch ip-addr.json ip-route.json ulimit-l proc/sys/kernel/osrelease proc/meminfo sys/module/nvidia etc/nccl.conf proc/driver/nvidia/gpus dev/infiniband sys/class/net sys/class/infiniband; do case " $nr " in *" $p "*) ;; *) printf '|%s\n' "$p" ;; esac; done
  printf '+dev/infiniband\n'
fi
e1 proc/sys/kernel/osrelease
em proc/meminfo
e1 sys/module/nvidia/version
em etc/nccl.conf
for g in "$R"/proc/driver/nvidia/gpus/*; do
  [ -e "$g/information" ] && em "proc/driver/nvidia/gpus/${g##*/}/information"
done
for f in "$R"/dev/infiniband/*; do
  [ -e "$f" ] && printf '@dev/infiniband/%s\n|\n' "${f##*/}"
done
for d in "$R"/sys/class/net/*; do
  [ -e "$d" ] || continue
  n=${d##*/}
  for a in operstate mtu address carrier speed; do e1 "sys/class/net/$n/$a"; done
done
for d in "$R"/sys/class/infiniband/*; do
  [ -e "$d" ] || continue
  n=${d##*/}
  b="sys/class/infiniband/$n"
  for a in hca_type fw_ver board_id; do e1 "$b/$a"; done
  for nd in "$d"/device/net/*; do
    [ -e "$nd" ] || continue
    printf '+%s/device/net/%s\n' "$b" "${nd##*/}"
    e1 "$b/device/net/${nd##*/}/ifindex"
  done
  for p in "$d"/ports/*; do
    [ -e "$p" ] || continue
    pb="$b/ports/${p##*/}"
    for a in state phys_state link_layer rate; do e1 "$pb/$a"; done
    for g in "$p"/gids/*; do
      [ -e "$g" ] || continue
      i=${g##*/}
      gid=
      { IFS= read -r gid || [ -n "$gid" ]; } < "$g" 2>/dev/null || continue
      case "$gid" in ''|0000:0000:0000:0000:0000:0000:0000:0000) continue ;; esac
      printf '@%s/gids/%s\n|%s\n' "$pb" "$i" "$gid"
      e1 "$pb/gid_attrs/types/$i"
      e1 "$pb/gid_attrs/ndevs/$i"
    done
  done
done
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_recorded_list_is_the_documented_one() {
        let line = SCRIPT
            .lines()
            .find(|l| l.trim_start().starts_with("for p in hostname"))
            .expect("the loop that writes `recorded`");
        let listed: Vec<&str> = line
            .trim_start()
            .trim_start_matches("for p in ")
            .split("; do")
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        assert_eq!(listed, RECORDED_PATHS);
    }
}
