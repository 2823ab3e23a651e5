//! Bounds on every count and port the user controls (tensor and pipeline parallel sizes, GPUs
//! per node, nodes, ports), and the checked arithmetic on them: a value out of range is refused
//! with a message that names the limit, never wrapped around into a plan (`--tp 65536 --pp
//! 65536` once multiplied to 0 GPUs). The same checks serve the CLI's value parsers, profiles
//! and the workloads. Deadlines from such values saturate (`crate::clock::later`). Pure.

/// Tensor-parallel size at most (GPUs one layer is split over).
pub const MAX_TP: u32 = 1024;
/// Pipeline-parallel size at most (stages).
pub const MAX_PP: u32 = 256;
/// GPUs of one model replica (tp × pp) at most.
pub const MAX_WORLD: u64 = 4096;
/// GPUs per node at most.
pub const MAX_GPUS_PER_NODE: u32 = 64;
/// Nodes of one job at most.
pub const MAX_NODES: u32 = 1024;
/// A timeout or grace period in seconds at most (30 days): longer is a typo, and deadlines
/// past it would overflow the clock's arithmetic.
pub const MAX_SECONDS: u64 = 30 * 24 * 3600;

/// `value` as a count between 1 and `max`, or why not (`what` names it: `--tp`, `tp`).
pub fn count(what: &str, value: u64, max: u64) -> Result<u32, String> {
    if value == 0 {
        return Err(format!("{what} {value}: must be at least 1"));
    }
    if value > max {
        return Err(format!("{what} {value}: at most {max} is supported"));
    }
    u32::try_from(value).map_err(|_| format!("{what} {value}: at most {max} is supported"))
}

/// `tp × pp`, checked: at most [`MAX_WORLD`] GPUs.
pub fn world(tp: u32, pp: u32) -> Result<u64, String> {
    let world = u64::from(tp) * u64::from(pp);
    if world > MAX_WORLD {
        return Err(format!(
            "tp × pp = {tp} × {pp} = {world} GPUs: at most {MAX_WORLD} GPUs per replica are supported"
        ));
    }
    Ok(world)
}

fn parse_count(flag: &str, s: &str, max: u32) -> Result<u32, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{flag} wants a whole number from 1 to {max}, got {s:?}"))?;
    count(flag, v, u64::from(max))
}

/// `--tp N`: 1 to [`MAX_TP`].
pub fn parse_tp(s: &str) -> Result<u32, String> {
    parse_count("--tp", s, MAX_TP)
}

/// `--pp N`: 1 to [`MAX_PP`].
pub fn parse_pp(s: &str) -> Result<u32, String> {
    parse_count("--pp", s, MAX_PP)
}

/// `--gpus-per-node N`: 1 to [`MAX_GPUS_PER_NODE`].
pub fn parse_gpus_per_node(s: &str) -> Result<u32, String> {
    parse_count("--gpus-per-node", s, MAX_GPUS_PER_NODE)
}

/// `--timeout SECONDS`, `--grace SECONDS`: 0 to [`MAX_SECONDS`].
pub fn parse_seconds(s: &str) -> Result<u64, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a whole number of seconds, got {s:?}"))?;
    seconds(v)
}

/// `v` seconds as a timeout or grace period: 0 to [`MAX_SECONDS`], or why not. Profiles'
/// `ready_timeout_s` (and `--set ready_timeout_s=`) are held to the same bound as the flag.
pub fn seconds(v: u64) -> Result<u64, String> {
    if v > MAX_SECONDS {
        return Err(format!(
            "{v} seconds is more than {MAX_SECONDS} (30 days), the longest supported"
        ));
    }
    Ok(v)
}

/// A TCP port: 1 to 65535 (0 is no port: the kernel would pick one at random).
pub fn parse_port(s: &str) -> Result<u16, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("expected a port from 1 to 65535, got {s:?}"))?;
    port(v)
}

/// `v` as a TCP port, or why not.
pub fn port(v: u64) -> Result<u16, String> {
    match u16::try_from(v) {
        Ok(0) => {
            Err("port 0 is not a port (the kernel would pick a random one): use 1 to 65535".into())
        }
        Ok(p) => Ok(p),
        Err(_) => Err(format!("port {v} is out of range: use 1 to 65535")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_refused_at_zero_and_past_their_limit_naming_it() {
        assert_eq!(parse_tp("4"), Ok(4));
        assert_eq!(parse_tp("0").unwrap_err(), "--tp 0: must be at least 1");
        assert_eq!(
            parse_tp("4294967295").unwrap_err(),
            "--tp 4294967295: at most 1024 is supported"
        );
        assert!(
            parse_tp("99999999999999999999")
                .unwrap_err()
                .contains("1 to 1024")
        );
        assert_eq!(
            parse_pp("65536").unwrap_err(),
            "--pp 65536: at most 256 is supported"
        );
        assert!(
            parse_gpus_per_node("65")
                .unwrap_err()
                .contains("at most 64")
        );
    }

    #[test]
    fn the_world_size_never_wraps() {
        assert_eq!(world(4, 2), Ok(8));
        let e = world(65536, 65536).unwrap_err();
        assert!(e.contains("65536 × 65536 = 4294967296 GPUs"), "{e}");
        assert!(e.contains("at most 4096"), "{e}");
        assert!(world(u32::MAX, u32::MAX).is_err());
    }

    #[test]
    fn seconds_are_bounded() {
        assert_eq!(parse_seconds("1800"), Ok(1800));
        assert!(
            parse_seconds("18446744073709551615")
                .unwrap_err()
                .contains("30 days")
        );
    }

    #[test]
    fn seconds_past_30_days_are_refused_naming_the_limit() {
        assert_eq!(seconds(MAX_SECONDS), Ok(MAX_SECONDS));
        assert!(seconds(u64::MAX).unwrap_err().contains("30 days"));
    }

    #[test]
    fn port_zero_and_ports_past_65535_are_refused() {
        assert_eq!(parse_port("8000"), Ok(8000));
        assert!(
            parse_port("0")
                .unwrap_err()
                .contains("port 0 is not a port")
        );
        assert!(parse_port("70000").unwrap_err().contains("out of range"));
        assert!(parse_port("x").is_err());
    }
}
