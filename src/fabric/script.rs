//! What a node runs for `fabric apply`, `fabric rollback` and the verification, as POSIX shell
//! text, and the readers of what those scripts print. Pure: `fabric_apply` runs them (as root,
//! through sudo where needed) and decides nothing either; the flow is:
//!
//! 1. [`stage`]: writes the new file into the state folder (`/var/lib/spark-launch/fabric`,
//!    0700), records each planned interface as it is (IPv4 addresses, MTU, up/down: once in
//!    `orig/` for `fabric rollback`, and in `try/before/` for this attempt), notes which
//!    conflicting files `--replace` moves, and says `unchanged` when the node already has
//!    exactly this (nothing else happens then).
//! 2. [`launch`]: starts the attempt detached from the SSH session (`systemd-run` where systemd
//!    runs, `setsid` otherwise) and returns at once. After a short delay, so that every node
//!    starts at about the same moment, the attempt moves conflicting files into
//!    `backup/<time>/`, installs the file (0600), runs `netplan apply`, and then waits for
//!    `confirmed`. Without it within the deadline (or on `abort`) it restores the previous
//!    file, the moved files and every interface as recorded, by itself: a plan that cuts the
//!    node off undoes itself, as `netplan try` does.
//! 3. [`status`] / [`confirm`] / [`abort`]: read, end or undo the attempt.
//! 4. [`rollback`]: `fabric rollback`: the backups back, spark-launch's file gone, `netplan
//!    apply`, every interface as it was before the first apply, and which planned addresses
//!    are still there.
//! 5. [`verify`] (no root): per link end, the address is up, `ip route get PEER` leaves by the
//!    planned interface, and `ping -M do -s MTU-28` passes.

use std::fmt;
use std::net::Ipv4Addr;

use serde::Serialize;

use super::{FabricPlan, NodeFabricPlan};
use crate::node::NodeName;
use crate::probe::facts::{Ipv4Iface, NetIf};
use crate::quote::{Style, quote};

/// spark-launch's state on a node (backups, records, the current attempt).
pub const STATE_DIR: &str = "/var/lib/spark-launch/fabric";

/// Shell single quoting (`it's` → `'it'\''s'`): the crate's one quoting function,
/// [`Style::Always`]. The values are interface names read printable (a NUL shown as `\u{0}`)
/// and addresses; a NUL that came anyway is kept, and the shell refuses the script, naming it.
pub fn sq(s: &str) -> String {
    quote(s, Style::Always)
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_else(|_| s.to_string())
}

const COMMON: &str = r#"exec </dev/null
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
S=/var/lib/spark-launch/fabric
T=$S/try
F=/etc/netplan/40-spark-launch.yaml
"#;

/// `record_if IF FILE`: the interface's MTU, admin state and IPv4 addresses, one per line.
const RECORD_IF: &str = r#"record_if() {
  {
    echo "mtu $(cat "/sys/class/net/$1/mtu" 2>/dev/null)"
    if ip -o link show dev "$1" 2>/dev/null | grep -q '[<,]UP[,>]'; then echo "up 1"; else echo "up 0"; fi
    ip -o -4 addr show dev "$1" 2>/dev/null | awk '{a=$4; b="-"; s="global"; for (i = 5; i < NF; i++) { if ($i == "brd") b = $(i+1); if ($i == "scope") s = $(i+1) } print "inet", a, b, s}'
  } > "$2"
}
"#;

/// `restore_if IF FILE`: makes the interface match such a record again (addresses not in it
/// removed, those in it added back, its MTU, down if it was down).
const RESTORE_IF: &str = r#"restore_if() {
  [ -e "/sys/class/net/$1" ] || return 0
  for a in $(ip -o -4 addr show dev "$1" 2>/dev/null | awk '{print $4}'); do
    awk -v a="$a" '$1 == "inet" && $2 == a { f = 1 } END { exit !f }' "$2" || ip addr del "$a" dev "$1"
  done
  grep '^inet ' "$2" | while read -r _ a b s; do
    ip -o -4 addr show dev "$1" 2>/dev/null | awk '{print $4}' | grep -qxF "$a" && continue
    if [ "$b" = - ]; then ip addr add "$a" scope "$s" dev "$1"; else ip addr add "$a" brd "$b" scope "$s" dev "$1"; fi
  done
  m=$(sed -n 's/^mtu //p' "$2")
  [ -n "$m" ] && ip link set dev "$1" mtu "$m"
  [ "$(sed -n 's/^up //p' "$2")" = 0 ] && ip link set dev "$1" down
  return 0
}
"#;

/// `busy`: another attempt is running on this node.
const BUSY: &str = r#"busy() {
  [ -e "$T/pid" ] && kill -0 "$(cat "$T/pid" 2>/dev/null)" 2>/dev/null
}
"#;

const EOF_MARK: &str = "SPARK_LAUNCH_FABRIC_EOF";

/// Stages `node`'s file; `moves` are the conflicting files `--replace` moves aside.
pub fn stage(node: &NodeFabricPlan, moves: &[String]) -> String {
    let text = node.netplan.clone().unwrap_or_default();
    let ifaces: Vec<String> = node.ifaces.iter().map(|i| sq(i.as_str())).collect();
    let mut checks = String::new();
    for i in &node.ifaces {
        let mtu = node.mtu.get(i).copied().unwrap_or(0);
        checks.push_str(&format!(
            "[ \"$(cat /sys/class/net/{}/mtu 2>/dev/null)\" = {mtu} ] || same=0\n",
            sq(i.as_str())
        ));
        if let Some(a) = node.addresses.get(i) {
            checks.push_str(&format!(
                "ip -o -4 addr show dev {} 2>/dev/null | awk '{{print $4}}' | grep -qxF {} || same=0\n",
                sq(i.as_str()),
                sq(&a.to_string())
            ));
        }
    }
    let moves: Vec<String> = moves.iter().map(|m| sq(m)).collect();
    format!(
        r#"{COMMON}{RECORD_IF}{BUSY}
if busy; then echo "status busy $(cat "$T/status" 2>/dev/null)"; exit 0; fi
(umask 077 && mkdir -p "$S/orig" "$S/backup") && chmod 700 "$S" || {{ echo "status failed cannot create $S"; exit 1; }}
rm -rf "$T"
mkdir -p "$T/before" || {{ echo "status failed cannot create $T"; exit 1; }}
cat > "$T/new.yaml" <<'{EOF_MARK}'
{text}{EOF_MARK}
for i in {ifaces}; do
  [ -e "/sys/class/net/$i" ] || {{ echo "status failed no interface $i"; rm -rf "$T"; exit 1; }}
done
: > "$T/moves"
for m in {moves}; do
  [ -e "$m" ] && echo "$m" >> "$T/moves"
done
same=1
cmp -s "$F" "$T/new.yaml" 2>/dev/null || same=0
[ -s "$T/moves" ] && same=0
{checks}if [ $same = 1 ]; then rm -rf "$T"; echo "status unchanged"; exit 0; fi
for i in {ifaces}; do
  [ -e "$S/orig/$i" ] || record_if "$i" "$S/orig/$i"
  record_if "$i" "$T/before/$i"
done
[ -e "$F" ] && cp "$F" "$T/prev.yaml"
echo staged > "$T/status"
echo "status staged"
"#,
        ifaces = ifaces.join(" "),
        moves = moves.join(" "),
    )
}

/// The detached attempt (written to the node by [`launch`]).
const RUN: &str = r#"S=/var/lib/spark-launch/fabric
T=$S/try
F=/etc/netplan/40-spark-launch.yaml
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
delay=$1
deadline=$2
echo $$ > "$T/pid"
st() { echo "$1" > "$T/status.new" && mv "$T/status.new" "$T/status"; }
rollback_try() {
  if [ -e "$T/prev.yaml" ]; then (umask 077 && cp "$T/prev.yaml" "$F.new") && mv "$F.new" "$F"; else rm -f "$F"; fi
  if [ -e "$T/moved" ]; then
    while read -r m b; do [ -e "$m" ] || mv "$b" "$m"; done < "$T/moved"
  fi
  netplan apply > "$T/rollback.log" 2>&1
  for f in "$T"/before/*; do [ -e "$f" ] && restore_if "${f##*/}" "$f"; done
}
sleep "$delay"
stamp=$(date +%Y%m%d-%H%M%S)
while read -r m; do
  [ -n "$m" ] || continue
  mkdir -p "$S/backup/$stamp"
  mv "$m" "$S/backup/$stamp/" && printf '%s %s\n' "$m" "$S/backup/$stamp/${m##*/}" >> "$T/moved"
done < "$T/moves"
(umask 077 && cp "$T/new.yaml" "$F.new") && mv "$F.new" "$F"
st applying
if ! netplan apply > "$T/netplan.log" 2>&1; then
  rollback_try
  st apply-failed
  rm -f "$T/pid"
  exit 1
fi
st applied
i=0
while [ $i -lt $((deadline * 2)) ]; do
  if [ -e "$T/confirmed" ]; then st confirmed; rm -f "$T/pid"; exit 0; fi
  [ -e "$T/abort" ] && break
  sleep 0.5
  i=$((i + 1))
done
rollback_try
if [ -e "$T/abort" ]; then st rolled-back; else st rolled-back-by-itself; fi
rm -f "$T/pid"
"#;

/// Starts the staged attempt: applied `delay_s` seconds from now, undone unless confirmed
/// within `deadline_s` seconds after `netplan apply`.
pub fn launch(delay_s: u32, deadline_s: u32) -> String {
    format!(
        r#"{COMMON}
[ -e "$T/new.yaml" ] || {{ echo "status failed nothing staged"; exit 1; }}
cat > "$T/run.sh" <<'{EOF_MARK}'
#!/bin/sh
{RESTORE_IF}{RUN}{EOF_MARK}
echo launched > "$T/status"
if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1 &&
  systemd-run --quiet --collect --unit="spark-launch-fabric-$(date +%s)" /bin/sh "$T/run.sh" {delay_s} {deadline_s} >/dev/null 2>&1; then
  echo "status launched systemd-run"
else
  setsid /bin/sh "$T/run.sh" {delay_s} {deadline_s} </dev/null >"$T/log" 2>&1 &
  echo "status launched setsid"
fi
"#
    )
}

/// Prints the attempt's state (and netplan's complaint when it failed).
pub fn status() -> String {
    format!(
        r#"{COMMON}
if [ ! -e "$T/status" ]; then echo "status none"; exit 0; fi
echo "status $(cat "$T/status")"
[ -s "$T/netplan.log" ] && tail -n 5 "$T/netplan.log" | sed 's/^/log /'
exit 0
"#
    )
}

/// Keeps the attempt: waits (at most 10 s) for the node to say so.
pub fn confirm() -> String {
    format!(
        r#"{COMMON}
[ -d "$T" ] || {{ echo "status none"; exit 0; }}
touch "$T/confirmed"
i=0
while [ $i -lt 20 ]; do
  s=$(cat "$T/status" 2>/dev/null)
  case $s in
    confirmed) rm -rf "$T"; echo "status confirmed"; exit 0 ;;
    rolled-back*|apply-failed) echo "status $s"; exit 0 ;;
  esac
  sleep 0.5
  i=$((i + 1))
done
echo "status $(cat "$T/status" 2>/dev/null)"
"#
    )
}

/// Undoes the attempt now; waits (at most 90 s) until it is undone.
pub fn abort() -> String {
    format!(
        r#"{COMMON}
[ -d "$T" ] || {{ echo "status none"; exit 0; }}
touch "$T/abort"
i=0
while [ $i -lt 180 ]; do
  s=$(cat "$T/status" 2>/dev/null)
  case $s in
    rolled-back*|apply-failed|confirmed|staged) echo "status $s"; exit 0 ;;
  esac
  sleep 0.5
  i=$((i + 1))
done
echo "status $(cat "$T/status" 2>/dev/null)"
"#
    )
}

/// `fabric rollback`: restores the backups and every recorded interface, removes
/// spark-launch's file, re-applies and says which planned addresses are still up.
pub fn rollback() -> String {
    format!(
        r#"{COMMON}{RESTORE_IF}{BUSY}
if busy; then echo "status busy $(cat "$T/status" 2>/dev/null)"; exit 0; fi
if [ ! -d "$S" ] && [ ! -e "$F" ]; then echo "status nothing"; exit 0; fi
planned=
[ -e "$F" ] && planned=$(awk '$1 == "-" && $2 ~ /^[0-9.]+\/[0-9]+$/ {{print $2}}' "$F")
kept=
for d in "$S"/backup/*/; do
  [ -d "$d" ] || continue
  for f in "$d"*; do
    [ -e "$f" ] || continue
    t="/etc/netplan/${{f##*/}}"
    if [ -e "$t" ]; then echo "kept $f ($t exists: compare them and move it back by hand)"; kept=1; continue; fi
    mv "$f" "$t" && echo "restored $t"
  done
done
if [ -e "$F" ]; then rm -f "$F" && echo "removed $F"; fi
if ! netplan apply > /tmp/spark-launch-rollback.$$ 2>&1; then
  echo "warn netplan apply failed: $(tail -n 3 /tmp/spark-launch-rollback.$$ | tr '\n' ' ')"
fi
rm -f /tmp/spark-launch-rollback.$$
for f in "$S"/orig/*; do
  [ -e "$f" ] || continue
  restore_if "${{f##*/}}" "$f" && echo "interface ${{f##*/}}"
done
for a in $planned; do
  ip -o -4 addr show 2>/dev/null | awk '{{print $4}}' | grep -qxF "$a" && echo "left $a"
done
if [ -z "$kept" ]; then rm -rf "$S"; fi
echo "status rolled-back"
"#
    )
}

/// The state of an attempt, as the node reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TryState {
    /// The node already has exactly this.
    Unchanged,
    Staged,
    Launched,
    Applying,
    Applied,
    Confirmed,
    /// `netplan apply` failed; the node undid the attempt at once.
    ApplyFailed,
    /// Undone on request.
    RolledBack,
    /// Undone by the node itself: no confirmation came in time.
    RolledBackByItself,
    /// Another attempt runs on the node.
    Busy,
    /// No attempt (nothing staged, or already cleaned up).
    None,
    /// The script could not do its job (the text says why).
    Failed(String),
}

impl fmt::Display for TryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryState::Failed(why) => write!(f, "failed: {why}"),
            other => f.write_str(match other {
                TryState::Unchanged => "unchanged",
                TryState::Staged => "staged",
                TryState::Launched => "launched",
                TryState::Applying => "applying",
                TryState::Applied => "applied",
                TryState::Confirmed => "confirmed",
                TryState::ApplyFailed => "netplan apply failed (undone)",
                TryState::RolledBack => "rolled back",
                TryState::RolledBackByItself => "rolled back by itself",
                TryState::Busy => "busy with another attempt",
                _ => "none",
            }),
        }
    }
}

/// The last `status ...` line of a script's output, and the `log ...` lines after it.
pub fn parse_status(out: &str) -> (TryState, Vec<String>) {
    let mut state = TryState::Failed("the node printed no status".into());
    let mut log = Vec::new();
    for line in out.lines() {
        if let Some(rest) = line.strip_prefix("status ") {
            let word = rest.split_whitespace().next().unwrap_or("");
            state = match word {
                "unchanged" => TryState::Unchanged,
                "staged" => TryState::Staged,
                "launched" => TryState::Launched,
                "applying" => TryState::Applying,
                "applied" => TryState::Applied,
                "confirmed" => TryState::Confirmed,
                "apply-failed" => TryState::ApplyFailed,
                "rolled-back" => TryState::RolledBack,
                "rolled-back-by-itself" => TryState::RolledBackByItself,
                "busy" => TryState::Busy,
                "none" | "nothing" => TryState::None,
                "failed" => {
                    TryState::Failed(rest.strip_prefix("failed").unwrap_or("").trim().to_string())
                }
                other => TryState::Failed(format!("unexpected status {other:?}")),
            };
        } else if let Some(rest) = line.strip_prefix("log ") {
            log.push(rest.to_string());
        }
    }
    (state, log)
}

/// What `fabric rollback` did on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RollbackReport {
    /// Nothing of spark-launch's was there.
    pub nothing: bool,
    pub restored: Vec<String>,
    pub removed: Vec<String>,
    /// Interfaces set back as recorded before the first apply.
    pub interfaces: Vec<String>,
    /// Planned addresses still up afterwards (should be none).
    pub left: Vec<String>,
    /// Backups that could not go back (a file of that name exists again).
    pub kept: Vec<String>,
    pub warnings: Vec<String>,
    pub busy: bool,
}

/// Reads [`rollback`]'s output.
pub fn parse_rollback(out: &str) -> RollbackReport {
    let mut r = RollbackReport::default();
    for line in out.lines() {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        let rest = rest.to_string();
        match word {
            "restored" => r.restored.push(rest),
            "removed" => r.removed.push(rest),
            "interface" => r.interfaces.push(rest),
            "left" => r.left.push(rest),
            "kept" => r.kept.push(rest),
            "warn" => r.warnings.push(rest),
            "status" if rest.starts_with("nothing") => r.nothing = true,
            "status" if rest.starts_with("busy") => r.busy = true,
            _ => {}
        }
    }
    r
}

/// One verification on one node: its end of a link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinkEndCheck {
    /// Index of the link in the plan.
    pub link: usize,
    pub iface: NetIf,
    pub addr: Ipv4Iface,
    pub peer: Ipv4Addr,
    pub mtu: u32,
}

/// Every check `node` runs: one per link end it has, with a known address on both ends.
pub fn checks_for(plan: &FabricPlan, node: &NodeName) -> Vec<LinkEndCheck> {
    let mut out = Vec::new();
    for (k, l) in plan.links.iter().enumerate() {
        for (me, mine, theirs) in [(&l.a, l.a_addr, l.b_addr), (&l.b, l.b_addr, l.a_addr)] {
            if &me.node != node {
                continue;
            }
            if let (Some(addr), Some(peer)) = (mine, theirs) {
                out.push(LinkEndCheck {
                    link: k,
                    iface: me.iface.clone(),
                    addr,
                    peer: peer.addr,
                    mtu: plan.mtu,
                });
            }
        }
    }
    out
}

/// The verification script for `checks` (no root needed). Each check retries its ping for a
/// few seconds (links settle after `netplan apply`); all run at once.
pub fn verify(checks: &[LinkEndCheck]) -> String {
    let mut out = String::from(
        r#"chk() {
  if ip -o -4 addr show dev "$2" 2>/dev/null | awk '{print $4}' | grep -qxF "$3"; then echo "$1 addr ok"; else echo "$1 addr missing"; fi
  dev=$(ip -o route get "$4" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i+1); exit }}')
  if [ "$dev" = "$2" ]; then echo "$1 route ok"; else echo "$1 route ${dev:-none}"; fi
  k=0
  while :; do
    if ping -M do -s $(($5 - 28)) -c 1 -W 1 -I "$2" "$4" >/dev/null 2>&1; then echo "$1 ping ok"; break; fi
    k=$((k + 1))
    if [ $k -ge 8 ]; then echo "$1 ping fail"; break; fi
    sleep 1
  done
}
"#,
    );
    for c in checks {
        out.push_str(&format!(
            "chk {} {} {} {} {} &\n",
            c.link,
            sq(c.iface.as_str()),
            sq(&c.addr.to_string()),
            sq(&c.peer.to_string()),
            c.mtu
        ));
    }
    out.push_str("wait\n");
    out
}

/// What one end of one link showed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndResult {
    /// The planned address is up.
    pub addr: Option<bool>,
    /// The interface `ip route get PEER` chose (`Some(iface)`), as seen.
    pub route: Option<String>,
    pub route_ok: Option<bool>,
    /// `ping -M do -s MTU-28 PEER` passed.
    pub ping: Option<bool>,
}

/// Reads [`verify`]'s output into (link index, result).
pub fn parse_verify(out: &str) -> Vec<(usize, EndResult)> {
    let mut map: Vec<(usize, EndResult)> = Vec::new();
    for line in out.lines() {
        let mut w = line.split_whitespace();
        let (Some(id), Some(kind), Some(value)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        let Ok(id) = id.parse::<usize>() else {
            continue;
        };
        let pos = match map.iter().position(|(k, _)| *k == id) {
            Some(p) => p,
            None => {
                map.push((id, EndResult::default()));
                map.len() - 1
            }
        };
        let r = &mut map[pos].1;
        match kind {
            "addr" => r.addr = Some(value == "ok"),
            "route" => {
                r.route_ok = Some(value == "ok");
                r.route = Some(value.to_string());
            }
            "ping" => r.ping = Some(value == "ok"),
            _ => {}
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(sq("it's"), r"'it'\''s'");
    }

    #[test]
    fn status_lines_become_states_and_the_last_one_wins() {
        let (s, log) =
            parse_status("status launched\nstatus apply-failed\nlog netplan: bad yaml\n");
        assert_eq!(s, TryState::ApplyFailed);
        assert_eq!(log, vec!["netplan: bad yaml"]);
        assert_eq!(
            parse_status("status failed no interface eth9").0,
            TryState::Failed("no interface eth9".into())
        );
        assert!(matches!(parse_status("").0, TryState::Failed(_)));
        assert_eq!(
            parse_status("status rolled-back-by-itself").0,
            TryState::RolledBackByItself
        );
    }

    #[test]
    fn verification_lines_group_by_link() {
        let r = parse_verify(
            "0 addr ok\n1 addr missing\n0 route ok\n0 ping ok\n1 route enP7s7\n1 ping fail\n",
        );
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].1.ping, Some(true));
        assert_eq!(r[1].1.route.as_deref(), Some("enP7s7"));
        assert_eq!(r[1].1.route_ok, Some(false));
        assert_eq!(r[1].1.addr, Some(false));
    }

    #[test]
    fn a_rollback_report_lists_what_came_back_and_what_was_left() {
        let r = parse_rollback(
            "restored /etc/netplan/40-cx7.yaml\nremoved /etc/netplan/40-spark-launch.yaml\ninterface enp1s0f1np1\nleft 192.168.100.1/24\nstatus rolled-back\n",
        );
        assert_eq!(r.restored, vec!["/etc/netplan/40-cx7.yaml"]);
        assert_eq!(r.left, vec!["192.168.100.1/24"]);
        assert!(!r.nothing);
        assert!(parse_rollback("status nothing").nothing);
    }
}
