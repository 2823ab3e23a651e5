//! Reading and writing `cluster.yaml`. Every value is checked while it is read, so a mistake is
//! reported as `cluster.yaml:7: nodes[1].port: ...` at the line that holds it; cross-node
//! problems (duplicate names, two heads) point at the line where that node starts. Writes are
//! atomic (a temporary file renamed over the old one).

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Deserializer;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};

use crate::node::NodeName;

use super::Inventory;

/// A problem at one line of the cluster file (`None`: the file as a whole).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineError {
    pub line: Option<usize>,
    pub message: String,
}

/// The cluster file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error(
        "the cluster file {} does not exist: add nodes with `spark-launch discover --save` or `spark-launch nodes add HOST`, or name them with `--hosts a,b`",
        .path.display()
    )]
    Missing { path: PathBuf },
    #[error("cannot read the cluster file {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a valid cluster file:{}", .path.display(), LineList(.path, .errors))]
    Invalid {
        path: PathBuf,
        errors: Vec<LineError>,
    },
    #[error("cannot write the cluster file {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

struct LineList<'a>(&'a Path, &'a [LineError]);

impl fmt::Display for LineList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in self.1 {
            match e.line {
                Some(l) => write!(f, "\n  {}:{l}: {}", self.0.display(), e.message)?,
                None => write!(f, "\n  {}: {}", self.0.display(), e.message)?,
            }
        }
        Ok(())
    }
}

/// Reads and validates the cluster file.
pub fn load(path: &Path) -> Result<Inventory, InventoryError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| InventoryError::Invalid {
            path: path.to_path_buf(),
            errors: vec![not_text()],
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(InventoryError::Missing {
                path: path.to_path_buf(),
            });
        }
        Err(source) => {
            return Err(InventoryError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    parse(&text).map_err(|errors| InventoryError::Invalid {
        path: path.to_path_buf(),
        errors,
    })
}

/// Reads the cluster file; a missing file is an empty inventory.
pub fn load_or_empty(path: &Path) -> Result<Inventory, InventoryError> {
    match load(path) {
        Err(InventoryError::Missing { .. }) => Ok(Inventory::default()),
        other => other,
    }
}

/// Parses and validates cluster-file text.
pub fn parse(text: &str) -> Result<Inventory, Vec<LineError>> {
    if text.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    }) {
        return Ok(Inventory::default());
    }
    let inv: Inventory = yaml_serde::from_str(text).map_err(|e| vec![yaml_error(&e)])?;
    let starts = node_lines(text);
    let mut errors: Vec<LineError> = inv
        .problems()
        .into_iter()
        .map(|(i, message)| LineError {
            line: starts.get(i).copied(),
            message: format!("nodes[{i}]: {message}"),
        })
        .collect();
    errors.extend(inv.ssh.problems().into_iter().map(|message| {
        LineError {
            line: text
                .lines()
                .position(|l| l.starts_with("ssh:"))
                .map(|i| i + 1),
            message,
        }
    }));
    if errors.is_empty() {
        Ok(inv)
    } else {
        Err(errors)
    }
}

fn yaml_error(e: &yaml_serde::Error) -> LineError {
    let text = e.to_string();
    match e.location() {
        Some(loc) => {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            LineError {
                line: Some(loc.line()),
                message: text
                    .strip_suffix(&suffix)
                    .map(str::to_string)
                    .unwrap_or(text),
            }
        }
        None => LineError {
            line: None,
            message: text,
        },
    }
}

/// The 1-based line where each item of the top-level `nodes:` list starts (block style; a
/// list written in flow style gives none, and errors then carry no line).
fn node_lines(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut in_nodes = false;
    let mut item_indent: Option<usize> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if !in_nodes {
            if indent == 0 && trimmed.starts_with("nodes:") {
                in_nodes = true;
            }
            continue;
        }
        if indent == 0 && !trimmed.starts_with('-') {
            break;
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            match item_indent {
                None => {
                    item_indent = Some(indent);
                    out.push(i + 1);
                }
                Some(ii) if ii == indent => out.push(i + 1),
                _ => {}
            }
        }
    }
    out
}

const HEADER: &str = "\
# spark-launch cluster file. Edit it freely; every command validates it.
# Per node: name, addresses (tried in order), user (default: yours), port (default 22),
# role (head | worker; default: the first node is the head), fabric (a cache of the last probe).
";

/// Writes the inventory atomically (temporary file, then rename), creating the folder.
pub fn save(path: &Path, inv: &Inventory) -> Result<(), InventoryError> {
    let body = yaml_serde::to_string(inv).map_err(|e| InventoryError::Write {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    write_atomic(path, format!("{HEADER}{body}").as_bytes())
}

/// Writes `bytes` to `path` through a temporary file renamed over it, keeping the old file's
/// mode (a new file is 0600: it names the user's machines and accounts). A missing folder is
/// created 0700.
fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), InventoryError> {
    let werr = |source| InventoryError::Write {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(werr)?;
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(werr)?;
    tmp.write_all(bytes).map_err(werr)?;
    tmp.as_file().sync_all().map_err(werr)?;
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0o600);
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))
            .map_err(werr)?;
    }
    tmp.persist(path).map_err(|e| werr(e.error))?;
    Ok(())
}

/// Writes `after` over the cluster file that held `before`, changing only the lines of the
/// nodes that differ (comments, order and formatting of the rest stay byte for byte). A file
/// that does not exist yet is written whole. A file whose layout cannot be edited line by
/// line is rewritten only when it holds no comment (nothing of the user's is lost); otherwise
/// the change is refused with what to do.
pub fn save_edited(
    path: &Path,
    before: &Inventory,
    after: &Inventory,
) -> Result<(), InventoryError> {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| InventoryError::Invalid {
            path: path.to_path_buf(),
            errors: vec![not_text()],
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return save(path, after),
        Err(source) => {
            return Err(InventoryError::Read {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let new = match super::edit::update(&text, before, after) {
        Ok(new) => new,
        Err(e) if !text.lines().any(|l| l.contains('#')) => {
            tracing::debug!("rewriting {} whole: {e}", path.display());
            return save(path, after);
        }
        Err(e) => {
            return Err(InventoryError::Write {
                path: path.to_path_buf(),
                source: std::io::Error::other(format!(
                    "{e}; it holds comments a rewrite would lose, so it was left as it is: make the change by hand, or write the nodes one `- name: ...` item per node"
                )),
            });
        }
    };
    write_atomic(path, new.as_bytes())
}

fn not_text() -> LineError {
    LineError {
        line: None,
        message: "the file is not text (UTF-8): a cluster file is YAML; move this one away and add nodes with `spark-launch nodes add HOST`".into(),
    }
}

// ---- value checks, run while reading (so serde reports the line) ----

pub(crate) fn de_node_name<'de, D: Deserializer<'de>>(d: D) -> Result<NodeName, D::Error> {
    d.deserialize_str(Checked("a node name", |s: &str| {
        NodeName::new(s).map_err(|e| e.to_string())
    }))
}

pub(crate) fn de_addresses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(AddressList)
}

pub(crate) fn de_user<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_str(Checked("a user name", |s: &str| {
        check_user(s).map(|_| Some(s.to_string()))
    }))
}

pub(crate) fn de_port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    d.deserialize_u16(PortVisitor)
}

/// A string checked inside the visitor, so the YAML deserializer reports the value's own line.
struct Checked<F>(&'static str, F);

impl<'de, T, F: FnOnce(&str) -> Result<T, String>> Visitor<'de> for Checked<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<T, E> {
        (self.1)(s).map_err(E::custom)
    }
}

struct AddressList;

impl<'de> Visitor<'de> for AddressList {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of addresses or host names")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut out = Vec::new();
        while let Some(a) = seq.next_element_seed(HostSeed)? {
            out.push(a);
        }
        if out.is_empty() {
            return Err(serde::de::Error::custom(
                "a node needs at least one address (an IP address or a host name)",
            ));
        }
        Ok(out)
    }
}

struct HostSeed;

impl<'de> DeserializeSeed<'de> for HostSeed {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(Checked("an IP address or a host name", |s: &str| {
            check_host(s).map(|_| s.to_string())
        }))
    }
}

struct PortVisitor;

impl<'de> Visitor<'de> for PortVisitor {
    type Value = u16;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a port number (1-65535)")
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u16, E> {
        match u16::try_from(v) {
            Ok(0) => Err(E::custom("port 0 is not a port (sshd listens on 22)")),
            Ok(p) => Ok(p),
            Err(_) => Err(E::custom(format!("{v} is not a port number (1-65535)"))),
        }
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<u16, E> {
        match u64::try_from(v) {
            Ok(u) => self.visit_u64(u),
            Err(_) => Err(E::custom(format!("{v} is not a port number (1-65535)"))),
        }
    }
}

/// An address or host name ssh can be given: an IPv4/IPv6 address or a DNS-style name.
pub fn check_host(a: &str) -> Result<(), String> {
    if a.parse::<std::net::IpAddr>().is_ok() {
        return Ok(());
    }
    // Digits and dots only: meant as an IPv4 address, and not a valid one (`999.1.1.1`). A
    // resolver would take it as a name and look it up (or worse, as a number).
    if !a.is_empty() && a.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{a:?} is not an IPv4 address: four numbers from 0 to 255, e.g. 169.254.12.7"
        ));
    }
    let ok = !a.is_empty()
        && a.len() <= 253
        && !a.starts_with(['-', '.'])
        && a.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{a:?} is neither an IP address nor a host name (letters, digits, '-', '.', '_')"
        ))
    }
}

/// A login name: letters, digits, `_`, `-`, `.`, not starting with `-`, at most 32.
pub fn check_user(u: &str) -> Result<(), String> {
    let ok = !u.is_empty()
        && u.len() <= 32
        && !u.starts_with('-')
        && u.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{u:?} is not a user name (letters, digits, '_', '-', '.', at most 32)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str) -> Vec<(Option<usize>, String)> {
        parse(text)
            .unwrap_err()
            .into_iter()
            .map(|e| (e.line, e.message))
            .collect()
    }

    #[test]
    fn an_ssh_section_names_a_key_and_a_known_hosts_file_by_absolute_paths_only() {
        let inv = parse(
            "ssh:\n  identity: /var/tmp/s/id_ed25519\n  known_hosts: /var/tmp/s/known_hosts\nnodes:\n  - name: a\n    addresses: [10.0.0.1]\n",
        )
        .unwrap();
        assert_eq!(
            inv.ssh.identity.as_deref(),
            Some(std::path::Path::new("/var/tmp/s/id_ed25519"))
        );
        let errs = errors("ssh:\n  identity: id_ed25519\n  known_hosts: \"/x\\\"y\"\nnodes: []\n");
        assert_eq!(
            errs,
            vec![
                (
                    Some(1),
                    "ssh.identity: \"id_ed25519\" is not an absolute path".to_string()
                ),
                (
                    Some(1),
                    "ssh.known_hosts: \"/x\\\"y\" holds a quote or a control character".to_string()
                ),
            ]
        );
        assert!(
            errors("ssh:\n  port: 2\nnodes: []\n")[0]
                .1
                .contains("unknown field")
        );
    }

    #[test]
    fn a_valid_file_reads_with_defaults() {
        let inv = parse(
            "# mine\nnodes:\n  - name: spark-1d84\n    addresses: [169.254.12.7, spark-1d84.local]\n    user: nvidia\n  - name: ws\n    addresses:\n      - 10.0.0.5\n    port: 2222\n    role: head\n",
        )
        .unwrap();
        assert_eq!(inv.nodes.len(), 2);
        assert_eq!(inv.nodes[0].port, 22);
        assert_eq!(inv.nodes[0].user.as_deref(), Some("nvidia"));
        assert_eq!(inv.head().unwrap().name.as_str(), "ws");
        assert!(parse("").unwrap().is_empty());
        assert!(parse("# nothing yet\n").unwrap().is_empty());
    }

    #[test]
    fn a_bad_value_is_reported_at_its_line() {
        assert_eq!(
            errors(
                "nodes:\n  - name: a\n    addresses: [x]\n  - name: b\n    addresses: [y]\n    port: 70000\n"
            ),
            vec![(
                Some(6),
                "nodes[1].port: 70000 is not a port number (1-65535)".to_string()
            )]
        );
        let e = errors(
            "nodes:\n  - name: a\n    addresses: [x]\n\n  - name: \"b c\"\n    addresses: [y]\n",
        );
        assert_eq!(e[0].0, Some(5));
        assert!(
            e[0].1
                .starts_with("nodes[1].name: invalid node name \"b c\""),
            "{e:?}"
        );
        let e = errors("nodes:\n  - name: a\n    addresses: [\"x;rm -rf\"]\n");
        assert_eq!(e[0].0, Some(3));
        assert!(
            e[0].1.contains("neither an IP address nor a host name"),
            "{e:?}"
        );
        let e = errors("nodes:\n  - name: a\n    addresses: [x]\n    user: \"-oProxyCommand=x\"\n");
        assert_eq!(e[0].0, Some(4));
        let e = errors("nodes:\n  - name: a\n    addresses: []\n");
        assert_eq!(e[0].0, Some(3));
        assert!(e[0].1.contains("at least one address"));
    }

    #[test]
    fn address_999_1_1_1_is_refused_as_no_ipv4_address() {
        // Seen once: `999.1.1.1` was accepted as a host name.
        let e = check_host("999.1.1.1").unwrap_err();
        assert!(e.contains("is not an IPv4 address"), "{e}");
        assert!(check_host("1.2.3").is_err());
        assert!(check_host("169.254.12.7").is_ok());
        assert!(check_host("spark-1d84.local").is_ok());
        let e = errors("nodes:\n  - name: a\n    addresses: [999.1.1.1]\n");
        assert_eq!(e[0].0, Some(3));
    }

    #[test]
    fn a_misspelt_key_and_a_missing_key_are_reported_at_the_node() {
        let e = errors("nodes:\n  - name: a\n    adresses: [x]\n");
        assert_eq!(e[0].0, Some(3));
        assert!(e[0].1.contains("unknown field `adresses`"), "{e:?}");
        let e = errors("nodes:\n  - name: a\n    addresses: [x]\n  - name: b\n");
        assert_eq!(e[0].0, Some(4));
        assert!(e[0].1.contains("missing field `addresses`"), "{e:?}");
        let e = errors("nodes: [\n");
        assert_eq!(e[0].0, Some(2));
    }

    #[test]
    fn cross_node_problems_point_at_the_line_where_each_node_starts() {
        let text = "nodes:\n- name: a\n  addresses: [x]\n  role: head\n# the second\n- name: b\n  addresses: [x]\n- name: a\n  addresses: [z]\n  role: head\n";
        let e = errors(text);
        assert_eq!(
            e,
            vec![
                (
                    Some(6),
                    "nodes[1]: address x of b is also an address of a: one address, one node"
                        .to_string()
                ),
                (
                    Some(8),
                    "nodes[2]: node name a is used twice (also node 1): names must be unique"
                        .to_string()
                ),
                (
                    Some(8),
                    "nodes[2]: a is marked `role: head` but so is a: a cluster has one head"
                        .to_string()
                ),
            ]
        );
    }

    #[test]
    fn the_error_text_names_the_file_and_line_of_each_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cluster.yaml");
        std::fs::write(
            &path,
            "nodes:\n  - name: a\n    addresses: [x]\n    port: 0\n",
        )
        .unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{p} is not a valid cluster file:\n  {p}:4: nodes[0].port: port 0 is not a port (sshd listens on 22)",
                p = path.display()
            )
        );
        assert!(matches!(
            load(&dir.path().join("none.yaml")),
            Err(InventoryError::Missing { .. })
        ));
        assert!(
            load_or_empty(&dir.path().join("none.yaml"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_saved_file_reads_back_the_same_and_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cluster.yaml");
        let mut inv = Inventory::default();
        let mut a = super::super::NodeConfig::new(NodeName::new("a").unwrap(), "169.254.1.1");
        a.user = Some("nvidia".into());
        inv.add(a);
        inv.add(super::super::NodeConfig::new(
            NodeName::new("b").unwrap(),
            "169.254.1.2",
        ));
        save(&path, &inv).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("# spark-launch cluster file."));
        assert_eq!(load(&path).unwrap(), inv);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        save(&path, &inv).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
