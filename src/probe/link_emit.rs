//! The link-layer probe: a POSIX shell script that finds which fabric netdev hears whom, before
//! any IPv4 address exists, and prints what it saw as snapshot stream entries (`links/...`,
//! read by `links::read_link_probe`). It also records `/etc/netplan/*.yaml` (`etc/netplan/...`)
//! where it may read them, so a fabric plan can name the files that already configure an
//! interface.
//!
//! On every fabric netdev (a netdev of an RDMA device) with carrier it pings the all-nodes
//! group `ff02::1` through that netdev only; every machine on the other end of the cable (or
//! on the switch) answers from its IPv6 link-local address, and the neighbour table then holds
//! the MAC behind each answer. Run as root, it first brings fabric netdevs that are
//! administratively down up (a port nobody configured), waits for carrier and for IPv6
//! duplicate address detection, and brings them down again at the end (after a pause, so that
//! the peers, probing at the same moment, still get their answers). It needs `sh`, `ip`, `ping`
//! (iputils), `sed` and `cat`; without `ip` it records no cabling (not recorded, so a fabric
//! plan says how to record or state it). Emitting only: it decides nothing.
//!
//! Append it to the snapshot emitter's output (`emit::SCRIPT`) to get one stream with facts and
//! cabling; run it on every node at once so raised links have a peer to answer.

/// The link probe script. Run it with `sh -c`, after (or without) the emitter.
pub const SCRIPT: &str = r#"
# Without `ip` no neighbour table can be read and no port raised: the cabling is then not
# recorded at all (no `links/probe`), rather than recorded half.
if command -v ip >/dev/null 2>&1; then
printf '@links/probe\n|1\n'
t=$(mktemp -d 2>/dev/null) || { t=/tmp/spark-launch-links.$$; mkdir -p "$t"; }
nds=
for d in /sys/class/infiniband/*/device/net/*; do
  [ -e "$d" ] || continue
  n=${d##*/}
  case " $nds " in *" $n "*) continue ;; esac
  nds="$nds $n"
done
raised=
if [ "$(id -u)" = 0 ]; then
  for n in $nds; do
    if ! ip -o link show dev "$n" 2>/dev/null | grep -q '[<,]UP[,>]'; then
      ip link set dev "$n" up 2>/dev/null && raised="$raised $n"
    fi
  done
fi
if [ -n "$raised" ]; then
  k=0
  while [ $k -lt 30 ]; do
    waiting=
    for n in $raised; do
      [ "$(cat "/sys/class/net/$n/carrier" 2>/dev/null)" = 1 ] || waiting=1
    done
    [ -z "$waiting" ] && break
    k=$((k + 1)); sleep 0.1
  done
fi
k=0
while [ $k -lt 30 ]; do
  tentative=
  for n in $nds; do
    [ -n "$(ip -6 addr show dev "$n" tentative 2>/dev/null)" ] && tentative=1
  done
  [ -z "$tentative" ] && break
  k=$((k + 1)); sleep 0.1
done
for n in $nds; do
  c=$(cat "/sys/class/net/$n/carrier" 2>/dev/null)
  printf '@links/%s/carrier\n|%s\n' "$n" "$c"
  case " $raised " in *" $n "*) printf '@links/%s/raised\n|1\n' "$n" ;; esac
  if [ "$c" = 1 ]; then
    ping -6 -c 2 -w 3 "ff02::1%$n" >"$t/$n.ping" 2>&1 &
  fi
done
wait
for n in $nds; do
  [ -e "$t/$n.ping" ] || continue
  printf '@links/%s/ping\n' "$n"
  sed 's/^/|/' "$t/$n.ping"
  printf '@links/%s/neigh\n' "$n"
  ip -6 neigh show dev "$n" 2>/dev/null | sed 's/^/|/'
done
rm -rf "$t"
if [ -n "$raised" ]; then
  sleep 2
  for n in $raised; do ip link set dev "$n" down 2>/dev/null; done
fi
fi
if [ -d /etc/netplan ]; then
  printf '+etc/netplan\n'
  for f in /etc/netplan/*.yaml; do
    [ -e "$f" ] || continue
    if v=$(cat "$f" 2>/dev/null); then
      printf '@etc/netplan/%s\n' "${f##*/}"
      printf '%s\n' "$v" | sed 's/^/|/'
    else
      printf '!etc/netplan/%s\n' "${f##*/}"
    fi
  done
fi
"#;
