//! The shell scripts that stage a model on a node, as plain strings, and the lines they read and
//! print. The executor (`apply::stage`) runs them through a node's shell (locally, or over
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
    s.push_str(
        r#"H=$(umask 077; mktemp) || exit 1
E=$(mktemp) || exit 1
trap 'rm -f "$H" "$E"' EXIT
IFS= read -r hdr || hdr=
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$H"
cd "$D" 2>/dev/null || mkdir -p "$D" 2>/dev/null && cd "$D" || {
  printf 'err\t-\t0\tcannot create or enter %s (not writable by %s?)\n' "$D" "$(id -un)"; exit 1; }
while IFS='	' read -r off len path src; do
  dir=$(dirname -- "$path")
  mkdir -p -- "$dir" 2>/dev/null || { printf 'err\t%s\t%s\tcannot create %s in %s (not writable by %s?)\n' "$path" "$off" "$dir" "$D" "$(id -un)"; exit 1; }
  ok=
  for try in 1 2 3; do
    # </dev/null: ssh would otherwise read (and swallow) the remaining task lines.
    if get "$off" "$len" "$src" </dev/null 2>"$E" | dd of="$path$P" bs=4M oflag=seek_bytes seek="$off" conv=notrunc 2>>"$E"; then
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
  printf '%s %s\n' "$off" "$len" >> "$path$JR"
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
    match source {
        Source::Ssh { args, .. } => {
            let args: Vec<String> = args.iter().map(|a| quote(a)).collect();
            // Its own TCP connection (no shared master): parallel streams use parallel
            // connections, each with its own cipher state on its own core.
            let _ = writeln!(
                s,
                "SSH=(ssh -o ControlMaster=no -o ControlPath=none {})",
                args.join(" ")
            );
            s.push_str(
                r#"q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
send() { "${SSH[@]}" "bash -c $(q "$SENDER")"; }
"#,
            );
        }
        Source::Local { .. } | Source::Http { .. } => {
            s.push_str("send() { bash -c \"$SENDER\"; }\n");
        }
    }
    s.push_str(
        r#"T=$(mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
E=$T/err
IFS= read -r _hdr || :
cat > "$T/in"
mkdir -p "$D" 2>/dev/null && cd "$D" || {
  printf 'err\t-\t0\tcannot create or enter %s (not writable by %s?)\n' "$D" "$(id -un)"; exit 1; }
mkdir -p "$(dirname "$C")" 2>/dev/null || :
# What the sender must send, in order: every range marked `send`.
awk -F '\t' '$1 == "file" { src = $5 } $1 == "range" && $4 == "send" { print $2 "\t" $3 "\t" src }' "$T/in" > "$T/send"
exec 3< <(send < "$T/send" 2>"$T/sender.err")
if python3 -c 'import sys; sys.exit(sys.version_info < (3, 7))' 2>/dev/null; then
  # One process reads, hashes and writes each chunk (copy_receiver.py); the loop below is the
  # same receiver for nodes without Python, at about twice the CPU per byte.
  python3 -c "$RECEIVER" "$T/sender.err" "$C" "$P" "$JR" "$D" < "$T/in"
  exit
fi
fail() { # fail PATH OFFSET WHAT
  msg=$(tail -n 3 "$T/sender.err" 2>/dev/null | tr '\n\t' '  ')
  printf 'err\t%s\t%s\t%s%s\n' "$1" "$2" "$3" "${msg:+: $msg}"
  exit 1
}
status=0
while IFS='	' read -r kind a b c d; do
  case "$kind" in
    file)
      size=$a want=$b path=$c
      mkdir -p -- "$(dirname -- "$path")" 2>/dev/null || fail "$path" 0 "cannot create $(dirname -- "$path") in $D (not writable by $(id -un)?)"
      [ -e "$path$P" ] || : > "$path$P"
      rm -f "$T/sum"
      exec 4> >(hasher > "$T/sum")
      hp=$! ;;
    range)
      off=$a len=$b
      if [ "$c" = keep ]; then
        dd if="$path$P" bs=4M iflag=skip_bytes,count_bytes skip="$off" count="$len" status=none >&4 || fail "$path" "$off" "cannot read back $path$P"
        continue
      fi
      if [ "$(stat -c %s -- "$path$P")" = "$off" ]; then
        # In order (the usual case): append, one process fewer on every byte.
        dd bs=4M iflag=fullblock,count_bytes count="$len" <&3 2>"$E" | tee -a -- "$path$P" >&4 || fail "$path" "$off" "cannot write $path$P"
      else
        dd bs=4M iflag=fullblock,count_bytes count="$len" <&3 2>"$E" | tee /dev/fd/4 | dd of="$path$P" bs=4M oflag=seek_bytes seek="$off" conv=notrunc status=none || fail "$path" "$off" "cannot write $path$P"
      fi
      got=$(tail -n1 "$E" | cut -d' ' -f1)
      [ "$got" = "$len" ] || fail "$path" "$off" "the stream ended after $got of $len bytes"
      printf '%s %s\n' "$off" "$len" >> "$path$JR"
      printf 'ok\t%s\t%s\n' "$len" "$path" ;;
    end)
      exec 4>&-
      wait "$hp" 2>/dev/null || :
      for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$T/sum" ] && break; sleep 0.1; done
      got=$(cut -c1-64 "$T/sum" 2>/dev/null)
      have=$(stat -c %s -- "$path$P")
      if [ "$got" = "$want" ] && [ "$have" = "$size" ]; then
        mv -f -- "$path$P" "$path" && rm -f -- "$path$JR"
        printf '%s\t%s\t%s\t-\t%s\n' "$size" "$(find "$path" -maxdepth 0 -printf '%T@')" "$got" "$path" >> "$C" 2>/dev/null || :
        printf 'done\t%s\n' "$path"
      else
        rm -f -- "$path$P" "$path$JR"
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
    s.push_str(
        r#"mkdir -p "$D" && cd "$D" || { echo "cannot enter $D" >&2; exit 1; }
mkdir -p "$(dirname "$C")" 2>/dev/null || :
status=0
while IFS='	' read -r kind a b c path; do
  case "$kind" in
    file)
      mkdir -p -- "$(dirname -- "$path")"
      [ -e "$path$P" ] || : > "$path$P"
      if [ "$a" = sha256 ]; then
        got=$(sha256sum < "$path$P" | cut -d' ' -f1)
      else
        got=$( { printf 'blob %s\0' "$c"; cat -- "$path$P"; } | sha1sum | cut -d' ' -f1)
      fi
      size=$(stat -c %s -- "$path$P")
      if [ "$got" = "$b" ] && [ "$size" = "$c" ]; then
        mv -f -- "$path$P" "$path" && rm -f -- "$path$JR"
        sha=$got
        [ "$a" = sha256 ] || sha=$(sha256sum < "$path" | cut -d' ' -f1)
        git=-
        [ "$a" = sha256 ] || git=$got
        printf '%s\t%s\t%s\t%s\t%s\n' "$size" "$(find "$path" -maxdepth 0 -printf '%T@')" "$sha" "$git" "$path" >> "$C" 2>/dev/null || :
        printf 'done\t%s\n' "$path"
      else
        rm -f -- "$path$P" "$path$JR"
        printf 'bad\t%s\t%s (%s bytes)\n' "$path" "$got" "$size"
        status=1
      fi ;;
    link)
      mkdir -p -- "$(dirname -- "$path")" && ln -sfn -- "$a" "$path" || status=1 ;;
    text)
      mkdir -p -- "$(dirname -- "$path")" && printf '%s' "$a" > "$path" || status=1 ;;
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
}
