//! The shell scripts that stage a model on a node, as plain strings, and the lines they read and
//! print. The executor (`staging`) runs them through a node's shell (locally, or over
//! SSH); nothing here runs anything.
//!
//! They need bash, GNU coreutils (`dd` with byte offsets, `sha256sum`, `sha1sum`), GNU find,
//! and `curl` (downloads) or `ssh` (copies between nodes): all on DGX OS and Ubuntu. Copies
//! receive through `python3` where it is installed (DGX OS and Ubuntu have it): one process
//! per stream instead of three on every byte. Every value that comes from a file name is
//! passed as data (stdin lines), never spliced into code.
//!
//! - [`scan`]: lists a model folder as `manifest::parse_scan` reads it, hashing only files
//!   whose size or mtime changed since the last scan (a cache kept outside the folder).
//! - [`fetch_stream`]: one stream. Reads its first stdin line (an HTTP header, possibly empty:
//!   the token never appears on a command line), then one range per line, fetches each into
//!   `<path>.sl-partial` at its offset, appends it to `<path>.sl-ranges`, and prints
//!   `ok<TAB>bytes<TAB>path`. Each range is tried three times before the stream gives up with
//!   `err<TAB>path<TAB>offset<TAB>message`.
//! - [`finalize`]: checks each fetched file's hash, renames it into place (or discards it and
//!   prints `bad`), then writes symlinks and small text files.
//!
//! What they write lies under the model folder, reached without following a link: every
//! folder is entered one part at a time and every file opened with `O_NOFOLLOW` (`BENEATH`
//! here, the same rules in `copy_receiver.py`); a planted link, a hard-linked partial file or
//! a path out of the folder is refused with an `err` line and left untouched. A finished file
//! is flushed to disk before it is renamed into place, its folder after, and only then
//! recorded in the hash cache (which lets the next scan skip hashing it).

use std::fmt::Write as _;

use super::manifest::{ContentHash, FetchFile, JOURNAL, PARTIAL, Range, StagePlan, Task};

/// Where the bytes of a stream come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// HTTP ranges of `{base}/{source}` (the Hub's `resolve/<commit>` URL); `source` is
    /// already URL-escaped.
    Http { base: String },
    /// Another node over SSH (the head, on its fabric address): `ssh ARGS... dd` of
    /// `{root}/{source}`.
    Ssh { args: Vec<String>, root: String },
    /// A folder on the same machine (single-node staging and tests).
    Local { root: String },
}

/// Single-quotes a value for the shell: the crate's one quoting function
/// ([`crate::quote::quote`], [`Style::Always`](crate::quote::Style::Always)). A value with a NUL
/// byte (the values here were checked where they came in: Hub paths refuse control characters)
/// is kept as it is, so the script holds it, and every shell refuses such a script, naming it
/// ([`crate::quote::NulByte`]): it never runs.
pub fn quote(v: &str) -> String {
    crate::quote::quote(v, crate::quote::Style::Always)
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_else(|_| v.to_string())
}

/// Where the hash cache of the folder `dir` is kept on a node: outside the model folder, in
/// the user's cache.
pub fn verify_cache_expr(dir: &str) -> String {
    let key: String = dir
        .trim_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '%'
            }
        })
        .collect();
    format!(
        "\"${{XDG_CACHE_HOME:-$HOME/.cache}}/spark-launch/verified/\"{}",
        quote(&format!("{key}.tsv"))
    )
}

const PRELUDE: &str = r#"set -u
set -o pipefail
export LC_ALL=C
"#;

/// What a refusal to write through a link says (`copy_receiver.py` gets it as an argument).
pub const LINKS_FIX: &str =
    "spark-launch writes nothing through a link in the model folder: remove it and run again";

/// The shell's way of writing under the model folder without following a link (the same rules
/// as `copy_receiver.py`): `beneath PATH` enters the folder of PATH below `$DP` (the model
/// folder's physical path) one part at a time, creating what is missing, refusing a part that
/// is a link or not a folder (checked again with `pwd -P` after each step, so a link swapped
/// in between is caught before anything is created in it), and sets `NAME` to PATH's last
/// part; on refusal `WHY` says why. `plain PATH SUFFIX` makes `$NAME$SUFFIX` exist as a plain
/// file with no other name, created with `O_NOFOLLOW` (`dd oflag=nofollow`), or prints an `err`
/// line and exits. Every later write goes through `dd oflag=nofollow` too. Needs `D`, `DP`, `E`
/// and `LINKS`.
const BENEATH: &str = r#"beneath() { # beneath PATH
  WHY= NAME=
  cd -- "$DP" || { WHY="cannot enter $D"; return 1; }
  local rest=$1 part done=
  case "/$rest/" in */../*|*/./*|*//*) WHY="refused $1: not a plain path inside $D"; return 1 ;; esac
  while [ "${rest#*/}" != "$rest" ]; do
    part=${rest%%/*} rest=${rest#*/} done=$done${done:+/}$part
    if [ -L "$part" ]; then WHY="refused $done in $D: it is a symbolic link; $LINKS"; return 1; fi
    if [ -e "$part" ] && [ ! -d "$part" ]; then WHY="refused $done in $D: it is not a folder; $LINKS"; return 1; fi
    [ -d "$part" ] || mkdir -- "$part" 2>/dev/null || [ -d "$part" ] || {
      WHY="cannot create $done in $D (not writable by $(id -un)?)"; return 1; }
    if ! cd -P -- "$part" 2>/dev/null || [ "$(pwd -P)" != "$DP/$done" ]; then
      WHY="refused $done in $D: it is a symbolic link; $LINKS"; return 1
    fi
  done
  NAME=$rest
}
refuse() { # refuse PATH OFFSET WHAT: a problem on this node, printed as an `err` line
  printf 'err\t%s\t%s\t%s\n' "$1" "$2" "$3"
  exit 1
}
errof() { # the system's reason in a dd/mv error file: the text after its last ': '
  tail -n 1 "$1" 2>/dev/null | sed 's/.*: //'
}
plain() { # plain PATH SUFFIX
  local f=$NAME$2
  [ -L "$f" ] && refuse "$1" 0 "refused $1$2: it is a symbolic link; $LINKS"
  dd of="$f" oflag=nofollow conv=notrunc count=0 status=none </dev/null 2>"$E.w" ||
    refuse "$1" 0 "cannot write $1$2: $(errof "$E.w")"
  local what
  what=$(stat -c '%F %h' -- "$f")
  case "$what" in
    "regular file 1"|"regular empty file 1") ;;
    "regular file "*|"regular empty file "*) refuse "$1" 0 "refused $1$2: it is a file with ${what##* } names (hard links); $LINKS" ;;
    *) refuse "$1" 0 "refused $1$2: it is not a plain file; $LINKS" ;;
  esac
}
"#;

/// Lists `dir` (see `manifest::parse_scan`). A missing folder lists as empty. `jobs` hashes
/// run in parallel.
pub fn scan(dir: &str, jobs: usize) -> String {
    let mut s = String::from(PRELUDE);
    let _ = writeln!(s, "R={}", quote(dir));
    let _ = writeln!(s, "C={}", verify_cache_expr(dir));
    let _ = writeln!(s, "J={}", jobs.max(1));
    s.push_str(
        r#"[ -d "$R" ] || exit 0
cd "$R" || { echo "cannot enter $R" >&2; exit 1; }
T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
find . -mindepth 1 -type l -printf 'l\t%l\t%P\n'
find . -mindepth 1 -type f -name '*.sl-partial' -printf 'p\t%s\t%P\n' | sed 's/\.sl-partial$//'
find . -mindepth 1 -type f -name '*.sl-ranges' -printf '%P\n' | while IFS= read -r j; do
  p=${j%.sl-ranges}
  while read -r off len; do printf 'j\t%s\t%s\t%s\n' "$off" "$len" "$p"; done < "$j"
done
find . -mindepth 1 -type f ! -name '*.sl-partial' ! -name '*.sl-ranges' ! -name '*.incomplete' \
  -printf '%s\t%T@\t%P\n' | sort -t '	' -k3 > "$T/list"
[ -f "$C" ] && sort -t '	' -k5 "$C" > "$T/cache" || : > "$T/cache"
# Known: same path, size and mtime as when last hashed.
awk -F '\t' -v known="$T/known" -v todo="$T/todo" '
  FILENAME == ARGV[1] { c[$5] = $0; next }
  { if ($3 in c) { split(c[$3], k, "\t"); if (k[1] == $1 && k[2] == $2) { print c[$3] > known; next } }
    print > todo }' "$T/cache" "$T/list"
touch "$T/known" "$T/todo"
# OpenSSL's sha256 (SHA extensions) when installed: about 4x coreutils' here. Same output.
if command -v openssl >/dev/null 2>&1; then
  sums() { for f in "$@"; do h=$(openssl dgst -sha256 -r < "$f") || exit 1; printf '%s  %s\n' "${h%% *}" "$f"; done; }
else
  sums() { sha256sum -- "$@"; }
fi
export -f sums
cut -f3 "$T/todo" | tr '\n' '\0' | xargs -0 -r -P "$J" -n 8 bash -c 'sums "$@"' _ > "$T/sums" || exit 1
awk -F '\t' 'FILENAME == ARGV[1] { s[substr($0, 67)] = substr($0, 1, 64); next }
  { if (!($3 in s)) { print "no hash for " $3 > "/dev/stderr"; exit 1 }
    print $1 "\t" $2 "\t" s[$3] "\t-\t" $3 }' "$T/sums" "$T/todo" > "$T/new0" || exit 1
: > "$T/new"
while IFS='	' read -r size mtime sum git path; do
  case "$path" in
    blobs/????????????????????????????????????????)
      git=$( { printf 'blob %s\0' "$size"; cat -- "$path"; } | sha1sum | cut -d' ' -f1) ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$mtime" "$sum" "$git" "$path" >> "$T/new"
done < "$T/new0"
cat "$T/known" "$T/new" | while IFS='	' read -r size mtime sum git path; do
  printf 'f\t%s\t%s\t%s\t%s\n' "$size" "$sum" "$git" "$path"
done
if [ -s "$T/new" ]; then
  mkdir -p "$(dirname "$C")" 2>/dev/null && cat "$T/known" "$T/new" > "$C.tmp.$$" 2>/dev/null && mv "$C.tmp.$$" "$C" 2>/dev/null || :
fi
exit 0
"#,
    );
    s
}

/// One fetch stream into `dest` (the model folder on this node).
pub fn fetch_stream(dest: &str, source: &Source) -> String {
    let mut s = String::from(PRELUDE);
    let _ = writeln!(s, "D={}", quote(dest));
    match source {
        Source::Http { base } => {
            let _ = writeln!(s, "BASE={}", quote(base));
            s.push_str(
                r#"get() { curl -fsSL --connect-timeout 20 -r "$1-$(( $1 + $2 - 1 ))" -H @"$H" "$BASE/$3"; }
"#,
            );
        }
        Source::Ssh { args, root } => {
            let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
            // One master connection per stream (its own ControlPath), reused for every range:
            // parallel streams are parallel TCP connections and ciphers, with no handshake per
            // range.
            let _ = writeln!(
                s,
                "SSH=(ssh -o ControlMaster=auto -o \"ControlPath=/tmp/sl-st-$$-%C\" -o ControlPersist=15 {})",
                args.join(" ")
            );
            let _ = writeln!(s, "ROOT={}", quote(root));
            s.push_str(
                r#"q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
get() { "${SSH[@]}" "dd if=$(q "$ROOT/$3") bs=4M iflag=skip_bytes,count_bytes skip=$1 count=$2 status=none"; }
"#,
            );
        }
        Source::Local { root } => {
            let _ = writeln!(s, "ROOT={}", quote(root));
            s.push_str(
                r#"get() { dd if="$ROOT/$3" bs=4M iflag=skip_bytes,count_bytes skip="$1" count="$2" status=none; }
"#,
            );
        }
    }
    let _ = writeln!(s, "P={}", quote(PARTIAL));
    let _ = writeln!(s, "JR={}", quote(JOURNAL));
    let _ = writeln!(s, "LINKS={}", quote(LINKS_FIX));
    s.push_str(BENEATH);
    s.push_str(
        r#"H=$(umask 077; mktemp) || exit 1
E=$(mktemp) || exit 1
trap 'rm -f "$H" "$E" "$E.w"' EXIT
IFS= read -r hdr || hdr=
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$H"
cd "$D" 2>/dev/null || mkdir -p "$D" 2>/dev/null && cd "$D" || {
  printf 'err\t-\t0\tcannot create or enter %s (not writable by %s?)\n' "$D" "$(id -un)"; exit 1; }
DP=$(pwd -P)
while IFS='	' read -r off len path src; do
  beneath "$path" || refuse "$path" "$off" "$WHY"
  plain "$path" "$P"
  ok=
  for try in 1 2 3; do
    # </dev/null: ssh would otherwise read (and swallow) the remaining task lines.
    if get "$off" "$len" "$src" </dev/null 2>"$E" | dd of="$NAME$P" bs=4M oflag=seek_bytes,nofollow seek="$off" conv=notrunc 2>>"$E"; then
      got=$(tail -n1 "$E" | cut -d' ' -f1)
      if [ "$got" = "$len" ]; then ok=1; break; fi
      echo "got $got of $len bytes" >> "$E"
    fi
    [ $try -lt 3 ] && sleep $try
  done
  if [ -z "$ok" ]; then
    msg=$(grep -v -e 'records in' -e 'records out' -e 'bytes' "$E" | tail -n 3 | tr '\n\t' '  ')
    [ -n "$msg" ] || msg=$(tail -n1 "$E" | tr '\n\t' '  ')
    printf 'err\t%s\t%s\t%s\n' "$path" "$off" "$msg"
    exit 1
  fi
  plain "$path" "$JR"
  printf '%s %s\n' "$off" "$len" | dd of="$NAME$JR" oflag=append,nofollow conv=notrunc status=none 2>"$E.w" ||
    refuse "$path" "$off" "cannot record the range in $path$JR: $(errof "$E.w")"
  printf 'ok\t%s\t%s\n' "$len" "$path"
done
exit 0
"#,
    );
    s
}

/// Prints `aes` when the node's CPU has AES instructions (x86 `flags`, Arm `Features`), else
/// `none`.
pub const CPU_AES: &str =
    "if grep -qw aes /proc/cpuinfo 2>/dev/null; then echo aes; else echo none; fi";

/// How a copy stream reaches the head (`SSH` options, `HOST`): a connection of its own (no
/// master shared between streams: parallel streams are parallel TCP connections, each with its
/// own cipher state on its own core), set up first as this stream's own master and tried
/// again, with pauses doubling from 250 ms, while the head's sshd turns new connections away
/// before the handshake (`MaxStartups`: every stream of every worker starts at once); the
/// bytes then go through it. The last try's error stays in `$T/connect.err`.
const COPY_CONNECT: &str = r#"q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
connect() {
  local try=1
  until "${SSH[@]}" -o ControlMaster=yes -o ControlPersist=30 -o "ControlPath=$T/m" -T -- "$HOST" true \
      </dev/null >/dev/null 2>"$T/connect.err"; do
    grep -q exchange_identification "$T/connect.err" || return 1
    if [ "$try" -ge 6 ]; then
      echo "the head's sshd turned the connection away $try times: raise its MaxStartups (10:30:100 by default) or lower --streams" >> "$T/connect.err"
      return 1
    fi
    sleep "$(awk -v t="$try" -v r="$RANDOM" 'BEGIN { p = 0.25 * 2 ^ (t - 1); if (p > 4) p = 4; print p * (1 + r / 65536) }')"
    try=$((try + 1))
  done
}
disconnect() { "${SSH[@]}" -o "ControlPath=$T/m" -O exit -- "$HOST" >/dev/null 2>&1 || :; }
send() { "${SSH[@]}" -o ControlMaster=no -o "ControlPath=$T/m" -T -- "$HOST" "bash -c $(q "$SENDER")"; }
"#;

/// The program that hashes a stream on a node: OpenSSL's (SHA extensions: about 4× coreutils'
/// `sha256sum` here) when installed, else `sha256sum`. Prints the hex digest first.
const HASHER: &str = r#"if command -v openssl >/dev/null 2>&1; then hasher() { openssl dgst -sha256 -r; }; else hasher() { sha256sum; }; fi
"#;

/// The receiving loop of a copy stream in Python (`python3 -c`), used where the node has it.
const COPY_RECEIVER: &str = include_str!("copy_receiver.py");

/// The sender side of a copy stream, run on the node that has the files (root `root`): reads
/// `offset<TAB>len<TAB>path` lines and writes exactly those bytes, back to back, to stdout.
/// A file shorter than a range asks for ends the stream (the receiver sees it end early).
pub fn copy_sender(root: &str) -> String {
    let mut s = String::from(PRELUDE);
    let _ = writeln!(s, "cd {} || exit 1", quote(root));
    s.push_str(
        r#"while IFS='	' read -r off len path; do
  size=$(stat -c %s -- "$path") || exit 1
  [ $(( off + len )) -le "$size" ] || { echo "$path is $size bytes, shorter than the copy expects: did it change on the head?" >&2; exit 1; }
  dd if="$path" bs=4M iflag=skip_bytes,count_bytes skip="$off" count="$len" status=none || exit 1
done
"#,
    );
    s
}

/// One long-lived copy stream into `dest` on the receiving node: ONE sender process on the
/// source (`ssh ARGS... bash -c SENDER`, or a local shell) writes every range this stream
/// needs back to back; this side (`copy_receiver.py` where the node has `python3`, else a
/// shell loop with the same input and output) writes each range at its offset into
/// `<path>.sl-partial`, journals it, and hashes the file's bytes as they arrive (the bytes a resumed file already
/// had are hashed from disk, once). At the end of each file the hash decides: renamed into
/// place (and recorded in the hash cache, so the next scan trusts it) and `done<TAB>path`,
/// or discarded with `bad<TAB>path<TAB>got`. Progress: `ok<TAB>bytes<TAB>path` per range.
/// Stdin: see [`copy_input`].
pub fn copy_stream(dest: &str, source: &Source) -> String {
    let mut s = String::from(PRELUDE);
    s.push_str(HASHER);
    let _ = writeln!(s, "D={}", quote(dest));
    let _ = writeln!(s, "C={}", verify_cache_expr(dest));
    let _ = writeln!(s, "P={}", quote(PARTIAL));
    let _ = writeln!(s, "JR={}", quote(JOURNAL));
    let root = match source {
        Source::Ssh { root, .. } | Source::Local { root } => root.as_str(),
        Source::Http { .. } => "",
    };
    let _ = writeln!(s, "SENDER={}", quote(&copy_sender(root)));
    let _ = writeln!(s, "RECEIVER={}", quote(COPY_RECEIVER));
    let _ = writeln!(s, "LINKS={}", quote(LINKS_FIX));
    s.push_str(BENEATH);
    match source {
        Source::Ssh { args, .. } => {
            // The last argument is the destination; the options go before it.
            let (host, opts) = args.split_last().map_or(("", &[][..]), |(h, o)| (h, o));
            let opts: Vec<String> = opts.iter().map(|a| quote(a)).collect();
            let _ = writeln!(s, "SSH=(ssh {})", opts.join(" "));
            let _ = writeln!(s, "HOST={}", quote(host));
            s.push_str(COPY_CONNECT);
        }
        Source::Local { .. } | Source::Http { .. } => {
            s.push_str("connect() { :; }\ndisconnect() { :; }\nsend() { bash -c \"$SENDER\"; }\n");
        }
    }
    s.push_str(
        r#"T=$(mktemp -d) || exit 1
trap 'disconnect; rm -rf "$T"' EXIT
E=$T/err
IFS= read -r _hdr || :
cat > "$T/in"
mkdir -p "$D" 2>/dev/null && cd "$D" || {
  printf 'err\t-\t0\tcannot create or enter %s (not writable by %s?)\n' "$D" "$(id -un)"; exit 1; }
mkdir -p "$(dirname "$C")" 2>/dev/null || :
# What the sender must send, in order: every range marked `send`.
awk -F '\t' '$1 == "file" { src = $5 } $1 == "range" && $4 == "send" { print $2 "\t" $3 "\t" src }' "$T/in" > "$T/send"
connect || {
  printf 'err\t-\t0\tssh to the head failed: %s\n' "$(tail -n 3 "$T/connect.err" | tr '\n\t' '  ')"; exit 1; }
exec 3< <(send < "$T/send" 2>"$T/sender.err")
if python3 -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null; then
  # One process reads, hashes and writes each chunk (copy_receiver.py); the loop below is the
  # same receiver for nodes without Python, at about twice the CPU per byte.
  python3 -c "$RECEIVER" "$T/sender.err" "$C" "$P" "$JR" "$D" "$LINKS" < "$T/in"
  exit
fi
fail() { # fail PATH OFFSET WHAT: with the sender's last words
  msg=$(tail -n 3 "$T/sender.err" 2>/dev/null | tr '\n\t' '  ')
  printf 'err\t%s\t%s\t%s%s\n' "$1" "$2" "$3" "${msg:+: $msg}"
  exit 1
}
DP=$(pwd -P)
status=0
while IFS='	' read -r kind a b c d; do
  case "$kind" in
    file)
      size=$a want=$b path=$c
      beneath "$path" || refuse "$path" 0 "$WHY"
      plain "$path" "$P"
      rm -f "$T/sum"
      exec 4> >(hasher > "$T/sum")
      hp=$! ;;
    range)
      off=$a len=$b
      if [ "$c" = keep ]; then
        dd if="$NAME$P" bs=4M iflag=nofollow,skip_bytes,count_bytes skip="$off" count="$len" status=none >&4 || fail "$path" "$off" "cannot read back $path$P"
        continue
      fi
      dd bs=4M iflag=fullblock,count_bytes count="$len" <&3 2>"$E" | tee /dev/fd/4 |
        dd of="$NAME$P" bs=4M oflag=seek_bytes,nofollow seek="$off" conv=notrunc status=none 2>"$E.w" || {
        [ -s "$E.w" ] && refuse "$path" "$off" "cannot write $path$P: $(errof "$E.w")"
        fail "$path" "$off" "cannot write $path$P"; }
      got=$(tail -n1 "$E" | cut -d' ' -f1)
      [ "$got" = "$len" ] || fail "$path" "$off" "the stream ended after $got of $len bytes"
      plain "$path" "$JR"
      printf '%s %s\n' "$off" "$len" | dd of="$NAME$JR" oflag=append,nofollow conv=notrunc status=none 2>"$E.w" ||
        refuse "$path" "$off" "cannot record the range in $path$JR: $(errof "$E.w")"
      printf 'ok\t%s\t%s\n' "$len" "$path" ;;
    end)
      exec 4>&-
      wait "$hp" 2>/dev/null || :
      for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$T/sum" ] && break; sleep 0.1; done
      got=$(cut -c1-64 "$T/sum" 2>/dev/null)
      have=$(stat -c %s -- "$NAME$P")
      if [ "$got" = "$want" ] && [ "$have" = "$size" ]; then
        # On disk before it has its name, its name on disk before the cache vouches for it.
        { sync -- "$NAME$P" && mv -fT -- "$NAME$P" "$NAME" && sync -- .; } 2>"$E.w" ||
          refuse "$path" 0 "cannot put $path in place: $(errof "$E.w")"
        rm -f -- "$NAME$JR"
        { printf '%s\t%s\t%s\t-\t%s\n' "$size" "$(find "./$NAME" -maxdepth 0 -printf '%T@')" "$got" "$path" >> "$C" && sync -- "$C"; } 2>/dev/null || :
        printf 'done\t%s\n' "$path"
      else
        rm -f -- "$NAME$P" "$NAME$JR"
        printf 'bad\t%s\t%s (%s bytes)\n' "$path" "$got" "$have"
        status=1
      fi ;;
  esac
done < "$T/in"
exit $status
"#,
    );
    s
}

/// The stdin of [`copy_stream`]: an empty header line, then per file `file<TAB>size<TAB>
/// sha256<TAB>path<TAB>source`, its ranges in order (`range<TAB>offset<TAB>len<TAB>send|keep`:
/// `keep` for what an interrupted run already wrote) and `end`.
pub fn copy_input(files: &[FetchFile]) -> String {
    let mut s = String::from("\n");
    for f in files {
        let want = match &f.check {
            ContentHash::Sha256(h) => h.as_str(),
            // Copies between nodes always know the sha256 (the head's scan computes it).
            ContentHash::GitSha1(_) => "-",
        };
        let _ = writeln!(s, "file\t{}\t{want}\t{}\t{}", f.size, f.path, f.source);
        for (r, send) in all_ranges(f) {
            let _ = writeln!(
                s,
                "range\t{}\t{}\t{}",
                r.offset,
                r.len,
                if send { "send" } else { "keep" }
            );
        }
        s.push_str("end\n");
    }
    s
}

/// Every byte of a file as ranges in order: the missing ones (`true`: to send) and the gaps
/// between them (`false`: already written by an earlier run).
pub fn all_ranges(f: &FetchFile) -> Vec<(Range, bool)> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut missing = f.ranges.clone();
    missing.sort();
    for r in missing {
        if r.offset > at {
            out.push((
                Range {
                    offset: at,
                    len: r.offset - at,
                },
                false,
            ));
        }
        out.push((r, true));
        at = r.end();
    }
    if at < f.size {
        out.push((
            Range {
                offset: at,
                len: f.size - at,
            },
            false,
        ));
    }
    out
}

/// The stdin of one stream: the header line, then its tasks.
pub fn stream_input(header: Option<&str>, tasks: &[Task]) -> String {
    let mut s = String::new();
    s.push_str(header.unwrap_or(""));
    s.push('\n');
    for t in tasks {
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{}",
            t.range.offset, t.range.len, t.path, t.source
        );
    }
    s
}

/// Checks, renames, links and writes, in `dest`. Reads its instructions from stdin (see
/// [`finalize_input`]); prints `done<TAB>path`, `bad<TAB>path<TAB>got` per fetched file.
pub fn finalize(dest: &str) -> String {
    let mut s = String::from(PRELUDE);
    let _ = writeln!(s, "D={}", quote(dest));
    let _ = writeln!(s, "C={}", verify_cache_expr(dest));
    let _ = writeln!(s, "P={}", quote(PARTIAL));
    let _ = writeln!(s, "JR={}", quote(JOURNAL));
    let _ = writeln!(s, "LINKS={}", quote(LINKS_FIX));
    s.push_str(BENEATH);
    s.push_str(
        r#"mkdir -p "$D" && cd "$D" || { echo "cannot enter $D" >&2; exit 1; }
DP=$(pwd -P)
E=$(mktemp) || exit 1
trap 'rm -f "$E" "$E.w"' EXIT
mkdir -p "$(dirname "$C")" 2>/dev/null || :
status=0
while IFS='	' read -r kind a b c path; do
  # A refusal goes to stderr (the caller shows it) and the other entries still go ahead.
  beneath "$path" || { echo "$WHY" >&2; status=1; continue; }
  case "$kind" in
    file)
      if [ -L "$NAME$P" ]; then echo "refused $path$P: it is a symbolic link; $LINKS" >&2; status=1; continue; fi
      dd of="$NAME$P" oflag=nofollow conv=notrunc count=0 status=none </dev/null || { status=1; continue; }
      if [ "$a" = sha256 ]; then
        got=$(dd if="$NAME$P" bs=4M iflag=nofollow status=none | sha256sum | cut -d' ' -f1)
      else
        got=$( { printf 'blob %s\0' "$c"; dd if="$NAME$P" bs=4M iflag=nofollow status=none; } | sha1sum | cut -d' ' -f1)
      fi
      size=$(stat -c %s -- "$NAME$P")
      if [ "$got" = "$b" ] && [ "$size" = "$c" ]; then
        # On disk before it has its name, its name on disk before the cache vouches for it.
        if ! { sync -- "$NAME$P" && mv -fT -- "$NAME$P" "$NAME" && sync -- .; }; then
          echo "cannot put $path in place" >&2; status=1; continue
        fi
        rm -f -- "$NAME$JR"
        sha=$got
        [ "$a" = sha256 ] || sha=$(sha256sum < "$NAME" | cut -d' ' -f1)
        git=-
        [ "$a" = sha256 ] || git=$got
        { printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$(find "./$NAME" -maxdepth 0 -printf '%T@')" "$sha" "$git" "$path" >> "$C" && sync -- "$C"; } 2>/dev/null || :
        printf 'done\t%s\n' "$path"
      else
        rm -f -- "$NAME$P" "$NAME$JR"
        printf 'bad\t%s\t%s (%s bytes)\n' "$path" "$got" "$size"
        status=1
      fi ;;
    link)
      # -T: an existing folder of that name is an error, never entered.
      ln -sfnT -- "$a" "$NAME" || status=1 ;;
    text)
      # Replaced, never written through: a link of that name is removed first.
      { rm -f -- "$NAME" && printf '%s' "$a" | dd of="$NAME" conv=excl oflag=nofollow status=none; } || status=1 ;;
  esac
done
exit $status
"#,
    );
    s
}

/// The stdin of [`finalize`] for a plan whose fetches all completed.
pub fn finalize_input(plan: &StagePlan) -> String {
    let mut s = String::new();
    for f in &plan.fetch {
        let (algo, hex) = match &f.check {
            ContentHash::Sha256(h) => ("sha256", h),
            ContentHash::GitSha1(h) => ("git-sha1", h),
        };
        let _ = writeln!(s, "file\t{algo}\t{hex}\t{}\t{}", f.size, f.path);
    }
    for (path, target) in &plan.links {
        let _ = writeln!(s, "link\t{target}\t-\t-\t{path}");
    }
    for (path, text) in &plan.texts {
        let _ = writeln!(s, "text\t{text}\t-\t-\t{path}");
    }
    s
}

/// What a fetch stream printed, one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamLine {
    Ok {
        bytes: u64,
        path: String,
    },
    Err {
        path: String,
        offset: u64,
        message: String,
    },
    Other(String),
}

pub fn parse_stream_line(line: &str) -> StreamLine {
    let parts: Vec<&str> = line.splitn(4, '\t').collect();
    match parts.as_slice() {
        ["ok", bytes, path] => match bytes.parse() {
            Ok(bytes) => StreamLine::Ok {
                bytes,
                path: path.to_string(),
            },
            Err(_) => StreamLine::Other(line.to_string()),
        },
        ["err", path, offset, message] => StreamLine::Err {
            path: path.to_string(),
            offset: offset.parse().unwrap_or(0),
            message: message.trim().to_string(),
        },
        _ => StreamLine::Other(line.to_string()),
    }
}

/// What [`finalize`] printed about one fetched file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FinalLine {
    Done(String),
    Bad { path: String, got: String },
    Other(String),
}

pub fn parse_final_line(line: &str) -> FinalLine {
    let parts: Vec<&str> = line.splitn(3, '\t').collect();
    match parts.as_slice() {
        ["done", path] => FinalLine::Done(path.to_string()),
        ["bad", path, got] => FinalLine::Bad {
            path: path.to_string(),
            got: got.to_string(),
        },
        _ => FinalLine::Other(line.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::sha256_hex;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn stream_input_puts_the_header_first_and_one_range_per_line() {
        let t = Task {
            path: "blobs/x".into(),
            source: "model.safetensors".into(),
            range: Range { offset: 10, len: 5 },
        };
        assert_eq!(
            stream_input(Some("Authorization: Bearer t"), &[t]),
            "Authorization: Bearer t\n10\t5\tblobs/x\tmodel.safetensors\n"
        );
        assert!(stream_input(None, &[]).starts_with('\n'));
    }

    #[test]
    fn stream_lines_parse_progress_and_failures() {
        assert_eq!(
            parse_stream_line("ok\t4096\tblobs/a"),
            StreamLine::Ok {
                bytes: 4096,
                path: "blobs/a".into()
            }
        );
        assert_eq!(
            parse_stream_line("err\tblobs/a\t8\tcurl: (22) 403"),
            StreamLine::Err {
                path: "blobs/a".into(),
                offset: 8,
                message: "curl: (22) 403".into()
            }
        );
    }

    /// A folder of links to every program of `/usr/bin` and `/bin` but Python's: a node
    /// without `python3`.
    fn path_without_python(dir: &std::path::Path) -> String {
        for bin in ["/usr/bin", "/bin"] {
            for e in std::fs::read_dir(bin).unwrap().flatten() {
                let name = e.file_name();
                let to = dir.join(&name);
                if !name.to_string_lossy().starts_with("python") && !to.exists() {
                    std::os::unix::fs::symlink(e.path(), to).unwrap();
                }
            }
        }
        dir.display().to_string()
    }

    /// Runs one copy stream from `src` into a fresh copy of `partial_dest` (the files an
    /// interrupted run left) with `path` as PATH; returns its output and the folder.
    fn copy_with(
        path: &str,
        src: &std::path::Path,
        seed: &[(&str, &[u8])],
        files: &[FetchFile],
    ) -> (String, tempfile::TempDir) {
        let dest = tempfile::tempdir().unwrap();
        for (name, bytes) in seed {
            std::fs::write(dest.path().join(name), bytes).unwrap();
        }
        let script = copy_stream(
            &dest.path().display().to_string(),
            &Source::Local {
                root: src.display().to_string(),
            },
        );
        let mut child = std::process::Command::new("/bin/bash")
            .args(["-c", &script])
            .env("PATH", path)
            .env("XDG_CACHE_HOME", dest.path().join(".cache"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(copy_input(files).as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        (String::from_utf8_lossy(&out.stdout).into_owned(), dest)
    }

    #[test]
    fn the_python_and_the_shell_receivers_write_resume_verify_and_report_alike() {
        let src = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 255) as u8).collect();
        let half = 1_000_000u64;
        std::fs::write(src.path().join("w.bin"), &big).unwrap();
        std::fs::write(src.path().join("bad.bin"), b"not what the head hashed").unwrap();
        let files = vec![
            // Resumed: the first MB was written by an interrupted run, the rest is sent.
            FetchFile {
                path: "w.bin".into(),
                source: "w.bin".into(),
                size: big.len() as u64,
                check: ContentHash::Sha256(sha256_hex(&big)),
                ranges: vec![Range {
                    offset: half,
                    len: big.len() as u64 - half,
                }],
                resumed: half,
            },
            FetchFile {
                path: "bad.bin".into(),
                source: "bad.bin".into(),
                size: 24,
                check: ContentHash::Sha256(sha256_hex(b"something else entirely")),
                ranges: vec![Range { offset: 0, len: 24 }],
                resumed: 0,
            },
        ];
        let seed: [(&str, &[u8]); 1] = [("w.bin.sl-partial", &big[..half as usize])];
        let no_python = tempfile::tempdir().unwrap();
        let shell_path = path_without_python(no_python.path());
        let python_path = std::env::var("PATH").unwrap();
        assert!(
            std::process::Command::new("python3")
                .arg("-V")
                .output()
                .is_ok_and(|o| o.status.success()),
            "python3 is needed for this test"
        );
        let (py_out, py_dest) = copy_with(&python_path, src.path(), &seed, &files);
        let (sh_out, sh_dest) = copy_with(&shell_path, src.path(), &seed, &files);
        let expected = "ok\t2000000\tw.bin\ndone\tw.bin\nok\t24\tbad.bin\nbad\tbad.bin\t";
        for (out, dest) in [(&py_out, &py_dest), (&sh_out, &sh_dest)] {
            assert!(out.starts_with(expected), "{out}");
            assert!(out.ends_with(" (24 bytes)\n"), "{out}");
            assert_eq!(std::fs::read(dest.path().join("w.bin")).unwrap(), big);
            let left: Vec<String> = std::fs::read_dir(dest.path())
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != ".cache")
                .collect();
            assert_eq!(left, vec!["w.bin".to_string()], "{out}");
            // The next scan trusts the copy: it is in the hash cache with find's mtime.
            let cache = std::fs::read_dir(dest.path().join(".cache/spark-launch/verified"))
                .unwrap()
                .flatten()
                .next()
                .unwrap()
                .path();
            let cached = std::fs::read_to_string(cache).unwrap();
            let mtime = std::process::Command::new("find")
                .arg(dest.path().join("w.bin"))
                .args(["-maxdepth", "0", "-printf", "%T@"])
                .output()
                .unwrap();
            assert_eq!(
                cached,
                format!(
                    "{}\t{}\t{}\t-\tw.bin\n",
                    big.len(),
                    String::from_utf8_lossy(&mtime.stdout),
                    sha256_hex(&big)
                )
            );
        }
        assert_eq!(py_out, sh_out);
    }

    #[test]
    fn the_token_never_appears_in_a_script() {
        let s = fetch_stream(
            "/d",
            &Source::Http {
                base: "https://huggingface.co/org/m/resolve/abc".into(),
            },
        );
        assert!(s.contains("-H @\"$H\""));
        assert!(!s.contains("Bearer"));
    }

    /// Runs `script` with bash (PATH `path`, the hash cache under `cache`, more variables in
    /// `env`) on `input`; returns its stdout, its stderr and whether it succeeded.
    fn run_script(
        script: &str,
        path: &str,
        cache: &std::path::Path,
        env: &[(&str, &str)],
        input: &str,
    ) -> (String, String, bool) {
        let mut child = std::process::Command::new("/bin/bash")
            .args(["-c", script])
            .env("PATH", path)
            .env("XDG_CACHE_HOME", cache)
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.success(),
        )
    }

    /// One file `path` of `bytes`, every byte still to send.
    fn whole(path: &str, bytes: &[u8]) -> FetchFile {
        FetchFile {
            path: path.into(),
            source: "w.bin".into(),
            size: bytes.len() as u64,
            check: ContentHash::Sha256(sha256_hex(bytes)),
            ranges: vec![Range {
                offset: 0,
                len: bytes.len() as u64,
            }],
            resumed: 0,
        }
    }

    /// What a planted link or foreign file in the model folder does to each writer.
    enum Plant {
        /// `<path>.sl-partial -> victim` (an existing file).
        PartialToVictim,
        /// `<path>.sl-partial -> <a file that does not exist yet>`.
        PartialToNothing,
        /// `<path>.sl-ranges -> victim`.
        JournalToVictim,
        /// `sub -> a folder outside` for the path `sub/w.bin`.
        FolderOutside,
        /// `<path>.sl-partial` is another name of the victim.
        SecondName,
    }

    #[test]
    fn a_link_planted_in_the_model_folder_is_never_written_through_by_either_receiver_or_the_fetch()
    {
        let src = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13) as u8).collect();
        std::fs::write(src.path().join("w.bin"), &data).unwrap();
        let no_python = tempfile::tempdir().unwrap();
        let shell_path = path_without_python(no_python.path());
        let python_path = std::env::var("PATH").unwrap();
        let source = Source::Local {
            root: src.path().display().to_string(),
        };
        let cases = [
            (
                Plant::PartialToVictim,
                "w.bin",
                "refused w.bin.sl-partial: it is a symbolic link",
            ),
            (
                Plant::PartialToNothing,
                "w.bin",
                "refused w.bin.sl-partial: it is a symbolic link",
            ),
            (
                Plant::JournalToVictim,
                "w.bin",
                "refused w.bin.sl-ranges: it is a symbolic link",
            ),
            (Plant::FolderOutside, "sub/w.bin", "refused sub in "),
            (
                Plant::SecondName,
                "w.bin",
                "refused w.bin.sl-partial: it is a file with 2 names",
            ),
        ];
        for (plant, path, said) in cases {
            for writer in ["python receiver", "shell receiver", "fetch"] {
                let dest = tempfile::tempdir().unwrap();
                let outside = tempfile::tempdir_in(dest.path()).unwrap();
                let model = dest.path().join("model");
                std::fs::create_dir(&model).unwrap();
                let victim = outside.path().join("victim");
                std::fs::write(&victim, b"precious").unwrap();
                let missing = outside.path().join("not-yet");
                match plant {
                    Plant::PartialToVictim => {
                        std::os::unix::fs::symlink(&victim, model.join("w.bin.sl-partial"))
                    }
                    Plant::PartialToNothing => {
                        std::os::unix::fs::symlink(&missing, model.join("w.bin.sl-partial"))
                    }
                    Plant::JournalToVictim => {
                        std::os::unix::fs::symlink(&victim, model.join("w.bin.sl-ranges"))
                    }
                    Plant::FolderOutside => {
                        std::os::unix::fs::symlink(outside.path(), model.join("sub"))
                    }
                    Plant::SecondName => {
                        std::fs::hard_link(&victim, model.join("w.bin.sl-partial"))
                    }
                }
                .unwrap();
                let dir = model.display().to_string();
                let (script, input, path_var) = match writer {
                    "fetch" => (
                        fetch_stream(&dir, &source),
                        stream_input(
                            None,
                            &[Task {
                                path: path.into(),
                                source: "w.bin".into(),
                                range: Range {
                                    offset: 0,
                                    len: data.len() as u64,
                                },
                            }],
                        ),
                        &python_path,
                    ),
                    receiver => (
                        copy_stream(&dir, &source),
                        copy_input(&[whole(path, &data)]),
                        if receiver == "python receiver" {
                            &python_path
                        } else {
                            &shell_path
                        },
                    ),
                };
                let (out, err, ok) =
                    run_script(&script, path_var, &dest.path().join(".cache"), &[], &input);
                let case = format!("{writer}, {path}: {out}{err}");
                assert!(!ok, "{case}");
                assert!(
                    out.starts_with(&format!("err\t{path}\t0\t{said}")),
                    "{case}"
                );
                assert!(out.contains(LINKS_FIX), "{case}");
                assert!(!err.contains("Traceback"), "{case}");
                assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "{case}");
                assert!(!missing.exists(), "{case}");
                let beside: Vec<_> = std::fs::read_dir(outside.path())
                    .unwrap()
                    .flatten()
                    .map(|e| e.file_name())
                    .collect();
                assert_eq!(beside, vec![std::ffi::OsString::from("victim")], "{case}");
                assert!(!model.join(path).exists(), "{case}");
            }
        }
    }

    #[test]
    fn finalizing_never_writes_through_a_link_planted_in_the_model_folder() {
        let dest = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let model = dest.path().join("model");
        std::fs::create_dir_all(model.join("refs")).unwrap();
        std::os::unix::fs::symlink(&victim, model.join("w.bin.sl-partial")).unwrap();
        std::os::unix::fs::symlink(&victim, model.join("refs/main")).unwrap();
        std::os::unix::fs::symlink(outside.path(), model.join("snapshots")).unwrap();
        let plan = StagePlan {
            fetch: vec![whole("w.bin", b"precious")],
            links: [("snapshots/abc/w.bin".into(), "../../w.bin".into())].into(),
            texts: [("refs/main".into(), "abc".into())].into(),
            ..StagePlan::default()
        };
        let (out, err, ok) = run_script(
            &finalize(&model.display().to_string()),
            &std::env::var("PATH").unwrap(),
            &dest.path().join(".cache"),
            &[],
            &finalize_input(&plan),
        );
        assert!(!ok, "{out}{err}");
        assert!(
            err.contains("refused w.bin.sl-partial: it is a symbolic link"),
            "{err}"
        );
        assert!(err.contains("refused snapshots in "), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
        // The text replaced the link, it did not write through it.
        assert_eq!(
            std::fs::read_to_string(model.join("refs/main")).unwrap(),
            "abc"
        );
        assert!(!model.join("refs/main").is_symlink());
    }

    /// A folder of shims that record, in `$SL_TRACE`, every `sync` (with the paths it was
    /// given, resolved) and `mv` (its last two arguments) the scripts run, then run the real
    /// programs; and a `sitecustomize` that does the same for Python's `os.fsync` and
    /// `os.replace`.
    fn tracing_shims(dir: &std::path::Path) {
        let real = |p: &str| {
            let out = std::process::Command::new("sh")
                .args(["-c", &format!("command -v {p}")])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let shims = [
            (
                "sync",
                format!(
                    "#!/bin/bash\nfor a; do case \"$a\" in -*) ;; *) echo \"fsync $(readlink -f -- \"$a\")\" ;; esac; done >> \"$SL_TRACE\"\nexec {} \"$@\"\n",
                    real("sync")
                ),
            ),
            (
                "mv",
                format!(
                    "#!/bin/bash\necho \"rename ${{@: -2:1}} ${{@: -1}}\" >> \"$SL_TRACE\"\nexec {} \"$@\"\n",
                    real("mv")
                ),
            ),
            (
                "sitecustomize.py",
                r#"import os
_fsync, _replace = os.fsync, os.replace
def _log(line):
    with open(os.environ["SL_TRACE"], "a") as f:
        f.write(line + "\n")
def fsync(fd):
    _log("fsync " + os.readlink(f"/proc/self/fd/{fd}"))
    return _fsync(fd)
def replace(a, b, **kw):
    _log(f"rename {a} {b}")
    return _replace(a, b, **kw)
os.fsync, os.replace = fsync, replace
"#
                .to_string(),
            ),
        ];
        for (name, text) in shims {
            std::fs::write(dir.join(name), text).unwrap();
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755))
                .unwrap();
        }
    }

    #[test]
    fn a_finished_file_is_on_disk_before_its_rename_and_its_name_before_the_hash_cache_line() {
        // What is proven: the order of the calls the receivers make (fsync of the file, the
        // rename, fsync of its folder, then the cache line and its fsync), traced through
        // shims of `sync`, `mv` and Python's `os`; not what a disk keeps across a power loss.
        let src = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(src.path().join("w.bin"), &data).unwrap();
        let shims = tempfile::tempdir().unwrap();
        tracing_shims(shims.path());
        let no_python = tempfile::tempdir().unwrap();
        let shell_path = format!(
            "{}:{}",
            shims.path().display(),
            path_without_python(no_python.path())
        );
        let python_path = format!(
            "{}:{}",
            shims.path().display(),
            std::env::var("PATH").unwrap()
        );
        let source = Source::Local {
            root: src.path().display().to_string(),
        };
        for (writer, path) in [("python", &python_path), ("shell", &shell_path)] {
            let dest = tempfile::tempdir().unwrap();
            let model = dest.path().join("model");
            let trace = dest.path().join("trace");
            let cache = dest.path().join(".cache");
            let (out, err, ok) = run_script(
                &copy_stream(&model.display().to_string(), &source),
                path,
                &cache,
                &[
                    ("SL_TRACE", trace.to_str().unwrap()),
                    ("PYTHONPATH", shims.path().to_str().unwrap()),
                ],
                &copy_input(&[whole("w.bin", &data)]),
            );
            assert!(ok, "{writer}: {out}{err}");
            assert_eq!(out, "ok\t300000\tw.bin\ndone\tw.bin\n", "{writer}: {err}");
            let model = model.canonicalize().unwrap();
            let cache_file = std::fs::read_dir(cache.join("spark-launch/verified"))
                .unwrap()
                .flatten()
                .next()
                .unwrap()
                .path()
                .canonicalize()
                .unwrap();
            assert_eq!(
                std::fs::read_to_string(&trace).unwrap(),
                format!(
                    "fsync {m}/w.bin.sl-partial\nrename w.bin.sl-partial w.bin\nfsync {m}\nfsync {c}\n",
                    m = model.display(),
                    c = cache_file.display()
                ),
                "{writer}"
            );
        }
    }

    #[test]
    fn a_full_disk_while_journaling_a_range_is_an_err_line_from_either_receiver() {
        // A real 1 MiB tmpfs (root: a private mount namespace of the script's own, gone with
        // it): the file's 1 MiB fills it exactly, so the journal's first line is what finds
        // the disk full.
        let src = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 5 + i / 7) as u8).collect();
        std::fs::write(src.path().join("w.bin"), &data).unwrap();
        let no_python = tempfile::tempdir().unwrap();
        let shell_path = path_without_python(no_python.path());
        let python_path = std::env::var("PATH").unwrap();
        assert!(
            nix::unistd::geteuid().is_root(),
            "this test mounts a tmpfs: run it as root (scripts/test-all does)"
        );
        for (writer, path) in [("python", &python_path), ("shell", &shell_path)] {
            let dest = tempfile::tempdir().unwrap();
            let model = dest.path().join("model");
            std::fs::create_dir(&model).unwrap();
            let script = copy_stream(
                &model.display().to_string(),
                &Source::Local {
                    root: src.path().display().to_string(),
                },
            );
            let mounted = format!(
                "mount -t tmpfs -o size=1m sl-enospc {} || exit 97\nexec /bin/bash -c {}",
                quote(&model.display().to_string()),
                quote(&script)
            );
            let unshare = format!("exec unshare --mount /bin/bash -c {}", quote(&mounted));
            let (out, err, _) = run_script(
                &unshare,
                path,
                &dest.path().join(".cache"),
                &[],
                &copy_input(&[whole("w.bin", &data)]),
            );
            assert_eq!(
                out,
                "err\tw.bin\t0\tcannot record the range in w.bin.sl-ranges: No space left on device\n",
                "{writer}: {err}"
            );
            assert!(!err.contains("Traceback"), "{writer}: {err}");
        }
    }
}
