//! The snapshot emitter: a POSIX shell script that prints a node's snapshot as a stream (see
//! `tree`). The same script runs on the local machine (`probe`, `probe --capture`) and on
//! remote nodes over SSH, and its output goes through the same reader as a snapshot folder.
//!
//! It only reads: sysfs, procfs (including the NVIDIA driver's GPU list), `/dev/infiniband`, `/etc/nccl.conf`, `ip -j addr/route`. With
//! `SL_ROOT=DIR` set it reads a snapshot folder instead of the live machine (tests use that to
//! prove the emitter covers every path the reader needs). It needs only `sh`, `sed`, `cat` and
//! `ip` (iproute2), all present on DGX OS and on every distribution with RDMA support; it uses
//! `read` rather than `cat` for single-line files, so the hundreds of GID slots cost no forks.

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
# command output stored as a file
ec() {
  if v=$(eval "$2" 2>/dev/null); then
    printf '@%s\n' "$1"; printf '%s\n' "$v" | sed 's/^/|/'
  fi
}
if [ -n "$R" ]; then
  e1 hostname; e1 arch; em ip-addr.json; em ip-route.json; e1 ulimit-l
else
  ec hostname 'cat /proc/sys/kernel/hostname'
  ec arch 'uname -m'
  ec ip-addr.json 'ip -j addr show'
  ec ip-route.json 'ip -j route show'
  ec ulimit-l 'ulimit -l'
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
