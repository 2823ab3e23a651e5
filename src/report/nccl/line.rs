//! One line of a captured log, before any meaning is given to it: the prefixes mpirun adds
//! (`[1,0]<stdout>:`), and the `host:pid:tid [dev] NCCL INFO|WARN` header NCCL puts in front of
//! every debug message (with an optional `[date time]` stamp, and `file:line` on WARN).
//!
//! Pure text handling; knows nothing about transports or verdicts.

/// Which stream mpirun says a tagged line came from (`--tag-output`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// The `[job,rank]<stream>:` tag OpenMPI puts in front of lines with `--tag-output`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MpiTag {
    pub rank: u32,
    pub stream: Stream,
}

/// Removes an OpenMPI output tag (`[1,0]<stdout>:` in 4.x, `[1,0]<stdout>: ` in 5.x) and a
/// trailing carriage return. Returns the tag when there was one.
pub fn strip_tag(line: &str) -> (Option<MpiTag>, &str) {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let Some(rest) = line.strip_prefix('[') else {
        return (None, line);
    };
    let Some((ids, rest)) = rest.split_once(']') else {
        return (None, line);
    };
    let Some((_, rank)) = ids.split_once(',') else {
        return (None, line);
    };
    let Ok(rank) = rank.trim().parse::<u32>() else {
        return (None, line);
    };
    let (stream, rest) = if let Some(r) = rest.strip_prefix("<stdout>:") {
        (Stream::Stdout, r)
    } else if let Some(r) = rest.strip_prefix("<stderr>:") {
        (Stream::Stderr, r)
    } else {
        return (None, line);
    };
    let rest = rest.strip_prefix(' ').unwrap_or(rest);
    (Some(MpiTag { rank, stream }), rest)
}

/// NCCL's debug levels that carry facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// A parsed NCCL debug line: `host:pid:tid [dev] NCCL INFO message` or
/// `host:pid:tid [dev] file.cc:123 NCCL WARN message`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DebugLine<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub tid: u32,
    /// The CUDA device current on the printing thread (proxy threads print 0).
    pub cuda_dev: i32,
    pub level: Level,
    /// `file.cc:123` (WARN lines only).
    pub source: Option<&'a str>,
    pub message: &'a str,
}

/// Parses an NCCL debug line anywhere in `line` (frameworks and mpirun may prefix it).
pub fn debug_line(line: &str) -> Option<DebugLine<'_>> {
    let (level, idx, marker) = if let Some(i) = line.find(" NCCL INFO ") {
        (Level::Info, i, " NCCL INFO ")
    } else if let Some(i) = line.find(" NCCL WARN ") {
        (Level::Warn, i, " NCCL WARN ")
    } else {
        return None;
    };
    let message = line[idx + marker.len()..].trim_end();
    let mut head = line[..idx].split_whitespace().rev();
    let mut source = None;
    let mut tok = head.next()?;
    if level == Level::Warn && !is_dev(tok) {
        source = Some(tok);
        tok = head.next()?;
    }
    let cuda_dev = tok.strip_prefix('[')?.strip_suffix(']')?.parse().ok()?;
    let ident = head.next()?;
    let mut parts = ident.rsplitn(3, ':');
    let tid = parts.next()?.parse().ok()?;
    let pid = parts.next()?.parse().ok()?;
    let host = parts.next()?;
    if host.is_empty() {
        return None;
    }
    Some(DebugLine {
        host,
        pid,
        tid,
        cuda_dev,
        level,
        source,
        message,
    })
}

fn is_dev(tok: &str) -> bool {
    tok.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .is_some_and(|t| t.parse::<i32>().is_ok())
}

/// The integer following `key` among whitespace-separated tokens (`rank 0 nranks 2`).
pub fn int_after(text: &str, key: &str) -> Option<u64> {
    let mut it = text.split_whitespace();
    while let Some(tok) = it.next() {
        if tok == key {
            return it.next()?.trim_end_matches([',', '.', ';']).parse().ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_info_line_gives_host_pid_device_and_message() {
        let l =
            debug_line("vm:1465:1479 [0] NCCL INFO [Proxy Service] Device 0 CPU core 0").unwrap();
        assert_eq!(l.host, "vm");
        assert_eq!(l.pid, 1465);
        assert_eq!(l.tid, 1479);
        assert_eq!(l.cuda_dev, 0);
        assert_eq!(l.level, Level::Info);
        assert_eq!(l.message, "[Proxy Service] Device 0 CPU core 0");
    }

    #[test]
    fn a_warn_line_with_timestamp_and_source_is_understood() {
        let l = debug_line(
            "[2025-11-02 10:01:02] spark-a:2211:2290 [0] transport/net_ib.cc:715 NCCL WARN NET/IB : Unable to open device roceP2p1s0f1",
        )
        .unwrap();
        assert_eq!(l.host, "spark-a");
        assert_eq!(l.pid, 2211);
        assert_eq!(l.level, Level::Warn);
        assert_eq!(l.source, Some("transport/net_ib.cc:715"));
        assert_eq!(l.message, "NET/IB : Unable to open device roceP2p1s0f1");
    }

    #[test]
    fn a_framework_prefix_before_the_nccl_header_is_ignored() {
        let l =
            debug_line("(RayWorkerWrapper pid=77) spark-b:77:77 [0] NCCL INFO Using network IB")
                .unwrap();
        assert_eq!(l.host, "spark-b");
        assert_eq!(l.message, "Using network IB");
    }

    #[test]
    fn lines_without_an_nccl_header_are_not_debug_lines() {
        assert!(debug_line("# Avg bus bandwidth    : 1.95093 ").is_none());
        assert!(debug_line("NCCL INFO floating").is_none());
    }

    #[test]
    fn mpirun_output_tags_of_both_generations_are_removed() {
        let (tag, rest) = strip_tag("[1,0]<stdout>:#  Rank  0 Group  0");
        assert_eq!(
            tag,
            Some(MpiTag {
                rank: 0,
                stream: Stream::Stdout
            })
        );
        assert_eq!(rest, "#  Rank  0 Group  0");
        let (tag, rest) = strip_tag("[1,1]<stderr>: spark-b:1:1 [0] NCCL INFO x\r");
        assert_eq!(tag.unwrap().rank, 1);
        assert_eq!(rest, "spark-b:1:1 [0] NCCL INFO x");
        assert_eq!(strip_tag("[RO]; OOB").1, "[RO]; OOB");
    }
}
