//! How spark-launch calls the OpenSSH client: the options every connection gets (host keys
//! pinned by node name, AES-GCM first, keep-alives, batch mode) and what a caller may change.

use std::path::PathBuf;
use std::time::Duration;

use crate::node::NodeName;

use super::error::Dest;

/// Options for every connection of a pool.
#[derive(Clone, Debug)]
pub struct SshOptions {
    /// The client program (`ssh`).
    pub program: PathBuf,
    /// TCP connect timeout per address.
    pub connect_timeout: Duration,
    /// How long a master connection stays up with no client (a crashed spark-launch leaves
    /// nothing behind for longer than this).
    pub persist: Duration,
    /// Known-hosts files to check, in order; the first one receives newly accepted keys.
    /// Default: spark-launch's own `~/.ssh/spark-launch_known_hosts` (which `trust` fills on
    /// every node), then the user's `~/.ssh/known_hosts` (read, never written). Empty: ssh's
    /// own default.
    pub known_hosts: Vec<PathBuf>,
    /// Record newly seen host keys in a private file of the pool's runtime folder (put first in
    /// `known_hosts`) instead of `~/.ssh`: `trust` uses it so that nothing is written on a node
    /// before it accepted us. `Pool::learned_hosts` reads it back.
    pub learn_hosts_privately: bool,
    /// Accept a node's host key the first time it is seen (recorded under the node's name).
    /// When false, an unknown key is refused.
    pub accept_new_host_keys: bool,
    /// An identity file to offer besides the user's defaults.
    pub identity: Option<PathBuf>,
    /// Extra `-o` options (`Key=Value`), placed before the defaults so they win.
    pub extra: Vec<String>,
    /// An ssh config file to read instead of `~/.ssh/config` (`ssh -F`).
    pub config_file: Option<PathBuf>,
}

impl Default for SshOptions {
    fn default() -> Self {
        SshOptions {
            program: PathBuf::from("ssh"),
            connect_timeout: Duration::from_secs(10),
            persist: Duration::from_secs(120),
            known_hosts: vec![
                PathBuf::from(format!("%d/{}", super::trust::config::KNOWN_HOSTS)),
                PathBuf::from("%d/.ssh/known_hosts"),
            ],
            learn_hosts_privately: false,
            accept_new_host_keys: true,
            identity: None,
            extra: Vec::new(),
            config_file: None,
        }
    }
}

/// AES-GCM first: the bulk copies (images, weights) run at AES-NI/ARMv8-crypto speed; the rest
/// of OpenSSH's default list follows, so any server still negotiates.
pub const CIPHERS: &str = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com";

/// The cipher preference for bulk copies between two nodes: AES-GCM when both ends have AES
/// instructions (AES-NI, ARMv8 crypto: several GB/s per core), ChaCha20-Poly1305 when either
/// lacks them (AES in software is several times slower than ChaCha20 there). Unknown ends
/// keep the AES-GCM preference of every connection. A `^` list: OpenSSH's defaults follow, so
/// any server still negotiates.
pub fn bulk_ciphers(a_has_aes: Option<bool>, b_has_aes: Option<bool>) -> &'static str {
    if a_has_aes == Some(false) || b_has_aes == Some(false) {
        "^chacha20-poly1305@openssh.com"
    } else {
        "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
    }
}

impl SshOptions {
    /// The arguments every ssh invocation for `node` gets (before the destination).
    pub(crate) fn common_args(&self, node: &NodeName, dest: &Dest, control: &str) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        if let Some(f) = &self.config_file {
            a.push("-F".into());
            a.push(f.display().to_string());
        }
        let mut o = |kv: String| {
            a.push("-o".into());
            a.push(kv);
        };
        for e in &self.extra {
            o(e.clone());
        }
        o(format!("HostKeyAlias={node}"));
        o(format!(
            "StrictHostKeyChecking={}",
            if self.accept_new_host_keys {
                "accept-new"
            } else {
                "yes"
            }
        ));
        if !self.known_hosts.is_empty() {
            let files: Vec<String> = self
                .known_hosts
                .iter()
                .map(|p| format!("\"{}\"", p.display()))
                .collect();
            o(format!("UserKnownHostsFile={}", files.join(" ")));
        }
        o("CheckHostIP=no".into());
        o("HashKnownHosts=no".into());
        o("UpdateHostKeys=no".into());
        o(format!(
            "ConnectTimeout={}",
            self.connect_timeout.as_secs().max(1)
        ));
        o("ServerAliveInterval=15".into());
        o("ServerAliveCountMax=3".into());
        o(format!("Ciphers={CIPHERS}"));
        o("LogLevel=ERROR".into());
        o(format!("ControlPath={control}"));
        if let Some(id) = &self.identity {
            o(format!("IdentityFile=\"{}\"", id.display()));
        }
        a.push("-p".into());
        a.push(dest.port.to_string());
        if let Some(u) = &dest.user {
            a.push("-l".into());
            a.push(u.clone());
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_copies_use_aes_gcm_only_where_both_ends_have_aes_instructions() {
        assert_eq!(
            bulk_ciphers(Some(true), Some(true)),
            "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
        );
        assert_eq!(
            bulk_ciphers(Some(true), Some(false)),
            "^chacha20-poly1305@openssh.com"
        );
        assert_eq!(bulk_ciphers(None, Some(true)), CIPHERS);
    }

    #[test]
    fn every_connection_pins_the_host_key_by_node_name_and_prefers_aes_gcm() {
        let args = SshOptions::default().common_args(
            &NodeName::new("spark-2").unwrap(),
            &Dest {
                host: "169.254.100.2".into(),
                user: Some("nvidia".into()),
                port: 2222,
            },
            "/run/user/1000/sl-x/c0",
        );
        let text = args.join(" ");
        assert!(text.contains("-o HostKeyAlias=spark-2"));
        assert!(text.contains("-o StrictHostKeyChecking=accept-new"));
        assert!(text.contains("-o Ciphers=^aes128-gcm@openssh.com,aes256-gcm@openssh.com"));
        assert!(text.contains("-o ControlPath=/run/user/1000/sl-x/c0"));
        assert!(text.ends_with("-p 2222 -l nvidia"));
        assert!(
            text.contains(
                "-o UserKnownHostsFile=\"%d/.ssh/spark-launch_known_hosts\" \"%d/.ssh/known_hosts\""
            ),
            "spark-launch's own known hosts first, then the user's: {text}"
        );
        assert!(text.contains("-o HashKnownHosts=no"));
    }
}
