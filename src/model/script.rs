//! The shell scripts that stage a model on a node, as plain strings, and the lines they read and
//! print. The executor (`apply::stage`) runs them through a node's shell (locally, or over
//! SSH); nothing here runs anything.
//!
//! They need bash, GNU coreutils (`dd` with byte offsets, `sha256sum`, `sha1sum`), GNU find,
//! and `curl` (downloads) or `ssh` (copies between nodes): all on DGX OS and Ubuntu. Every
//! value that comes from a file name is passed as data (stdin lines), never spliced into code.
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

use super::manifest::{Check, JOURNAL, PARTIAL, StagePlan, Task};

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

/// Single-quotes a value for the shell.
pub fn quote(v: &str) -> String {
    format!("'{}'", v.replace('\'', r"'\''"))
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
cut -f3 "$T/todo" | tr '\n' '\0' | xargs -0 -r -P "$J" -n 8 sha256sum -- > "$T/sums" || exit 1
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
            Check::Sha256(h) => ("sha256", h),
            Check::GitSha1(h) => ("git-sha1", h),
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
    use crate::model::manifest::Range;

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
