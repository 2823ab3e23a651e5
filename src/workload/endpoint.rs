//! Who may reach a serving job's API: the address the engine binds to on the head
//! (`--bind all|fabric|ADDR`) and the API key it enforces (`--api-key KEY|auto|@FILE`).
//!
//! - `all` (the default) listens on every interface of the head, `fabric` on the head's
//!   control-plane address on the cluster's fabric (derive's choice), `ADDR` on an address the
//!   head's facts list (or loopback); anything else is refused before anything starts.
//! - The key is resolved before planning (`api_key`: `auto` is generated once and kept in
//!   a 0600 file in the config folder) and reaches the engine where its seam says
//!   (`engines::ApiKeySupport`: vLLM's `VLLM_API_KEY` in the head's environment), never on a
//!   command line; every plan printout shows `<set>`. An engine that cannot enforce a key
//!   (TensorRT-LLM's `trtllm-serve`) refuses one rather than silently not enforcing it.
//!
//! Pure: facts and options in, an address, a refusal or a warning out.

use std::fmt;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use super::serve::Problem;
use crate::derive::{NodeEnv, NodeInput};
use crate::plan::secret::Secret;

/// The variable the printed `curl` takes the key from.
pub const CLIENT_KEY_VAR: &str = "SPARK_LAUNCH_API_KEY";

/// Where the API listens on the head.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bind {
    /// Every interface (`0.0.0.0`).
    #[default]
    All,
    /// The head's address on the cluster's fabric.
    Fabric,
    /// One address of the head.
    Addr(Ipv4Addr),
}

impl std::str::FromStr for Bind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "all" | "0.0.0.0" => Ok(Bind::All),
            "fabric" => Ok(Bind::Fabric),
            other => other.parse().map(Bind::Addr).map_err(|_| {
                format!("expected all, fabric or an IPv4 address of the head, got {s:?}")
            }),
        }
    }
}

impl fmt::Display for Bind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bind::All => f.write_str("all"),
            Bind::Fabric => f.write_str("fabric"),
            Bind::Addr(a) => write!(f, "{a}"),
        }
    }
}

/// What the user asked for as the API key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiKeyAsk {
    /// The key itself (`--api-key KEY`).
    Given(Secret),
    /// `auto`: the key spark-launch generated once and keeps in the config folder.
    Auto,
    /// `@FILE`: the first line of this file (a profile's `api_key: "@/path"`).
    File(String),
}

impl std::str::FromStr for ApiKeyAsk {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(ApiKeyAsk::Auto),
            f if f.starts_with('@') => {
                let path = &f[1..];
                if path.is_empty() {
                    Err("@FILE needs a file name".into())
                } else {
                    Ok(ApiKeyAsk::File(path.to_string()))
                }
            }
            k => Secret::new(k)
                .map(ApiKeyAsk::Given)
                .ok_or_else(|| "an empty API key".to_string()),
        }
    }
}

/// The resolved key and where a client finds it (never the key itself in printouts).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiKey {
    pub key: Secret,
    /// The file that holds it (`auto`, `@FILE`); `None` for a key given on the command line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl ApiKey {
    /// The `Authorization` header for the printed `curl`, reading the key where it is kept:
    /// the file, else `$SPARK_LAUNCH_API_KEY`.
    pub fn curl_header(&self) -> String {
        match &self.file {
            Some(f) => format!("-H \"Authorization: Bearer $(cat {f})\""),
            None => format!("-H \"Authorization: Bearer ${CLIENT_KEY_VAR}\""),
        }
    }
}

/// The address the engine binds to (`0.0.0.0` for all) and the host users reach, or why the
/// bind cannot be used on this head.
pub fn bind_addr(
    bind: Bind,
    head: &NodeInput,
    head_env: &NodeEnv,
) -> Result<Option<Ipv4Addr>, Problem> {
    match bind {
        Bind::All => Ok(None),
        Bind::Fabric => Ok(Some(head_env.control.addr)),
        Bind::Addr(a) if a.is_loopback() => Ok(Some(a)),
        Bind::Addr(a) => {
            let has: Vec<Ipv4Addr> = head
                .facts
                .interfaces
                .iter()
                .flat_map(|i| i.ipv4.iter().map(|x| x.addr))
                .collect();
            if has.contains(&a) {
                Ok(Some(a))
            } else {
                Err(Problem::new(
                    format!(
                        "--bind {a}: {} has no such address (it has {})",
                        head.name,
                        if has.is_empty() {
                            "none in its facts".to_string()
                        } else {
                            has.iter()
                                .map(|x| x.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                    "bind to one of the head's addresses, --bind fabric, or --bind all",
                ))
            }
        }
    }
}

/// The warning for an API open on every interface with no key, if that is the case.
pub fn open_warning(bind: Bind, key: bool, head: &str, port: u16) -> Option<String> {
    (bind == Bind::All && !key).then(|| {
        format!(
            "the API on {head}:{port} listens on every interface with no API key: anyone who reaches {head} can use it (fix: --api-key auto, or --bind fabric)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_and_api_key_parse_what_the_user_types() {
        assert_eq!("all".parse::<Bind>(), Ok(Bind::All));
        assert_eq!("fabric".parse::<Bind>(), Ok(Bind::Fabric));
        assert_eq!(
            "10.0.0.1".parse::<Bind>(),
            Ok(Bind::Addr(Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert!("eth0".parse::<Bind>().is_err());
        assert_eq!("auto".parse::<ApiKeyAsk>(), Ok(ApiKeyAsk::Auto));
        assert_eq!("@/k".parse::<ApiKeyAsk>(), Ok(ApiKeyAsk::File("/k".into())));
        assert!(matches!(
            "sk-1".parse::<ApiKeyAsk>(),
            Ok(ApiKeyAsk::Given(_))
        ));
        assert!("".parse::<ApiKeyAsk>().is_err());
    }

    #[test]
    fn the_printed_curl_reads_the_key_from_its_file_or_a_variable_never_inline() {
        let k = ApiKey {
            key: Secret::new("sk-real").unwrap(),
            file: Some("/home/u/.config/spark-launch/api-key".into()),
        };
        assert_eq!(
            k.curl_header(),
            "-H \"Authorization: Bearer $(cat /home/u/.config/spark-launch/api-key)\""
        );
        let k = ApiKey { file: None, ..k };
        assert!(!k.curl_header().contains("sk-real"));
        assert!(k.curl_header().contains("$SPARK_LAUNCH_API_KEY"));
    }

    #[test]
    fn only_an_open_api_without_a_key_is_warned_about() {
        assert!(open_warning(Bind::All, false, "n1", 8000).is_some());
        assert!(open_warning(Bind::All, true, "n1", 8000).is_none());
        assert!(open_warning(Bind::Fabric, false, "n1", 8000).is_none());
    }
}
