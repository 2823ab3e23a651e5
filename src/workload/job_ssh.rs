//! A job's own SSH identity for MPI between containers (`trtllm`, `nccl-test` in containers):
//! one client key pair and one host key pair, generated for each launch (`launch::job_ssh`),
//! never the user's `~/.ssh` or the node's `/etc/ssh`. This module says what goes where:
//!
//! - the public halves travel in the environment (`SL_JOB_SSH_PUBKEY`: the one key sshd
//!   accepts; `SL_JOB_HOST_PUBKEY`: the one host key the ssh client accepts, pinned for every
//!   peer's address and port); their names hold `KEY`, so plans print `<set>`;
//! - the private halves are [`SecretFile`]s, which the runtime uploads into the created
//!   container before it starts (0600, root): the host key into every container that runs
//!   sshd, the client key into the head's only (the one that runs mpirun). They never reach
//!   argv, the environment or the Docker create body, and go away with the container.
//!
//! Pure: keys in, container specs changed.

use crate::plan::ContainerSpec;
use crate::plan::secret::Secret;
use crate::plan::spec::SecretFile;

/// Where the private halves are put inside the containers (the entrypoint's `SL_JOB_SSH`).
pub const JOB_SSH_DIR: &str = "/etc/spark-launch/job-ssh";
/// The host's private key, in every container that runs sshd.
pub const HOST_KEY_FILE: &str = "/etc/spark-launch/job-ssh/ssh_host_ed25519_key";
/// The client's private key, in the head's container only.
pub const CLIENT_KEY_FILE: &str = "/etc/spark-launch/job-ssh/id_ed25519";
/// The pinned host key for every peer, written by the entrypoint from [`ENV_HOST_PUBLIC`].
pub const KNOWN_HOSTS_FILE: &str = "/etc/spark-launch/job-ssh/known_hosts";
/// The client's public key: what sshd accepts (`authorized_keys`).
pub const ENV_CLIENT_PUBLIC: &str = "SL_JOB_SSH_PUBKEY";
/// The host's public key: what the ssh client accepts (`known_hosts`, for every peer).
pub const ENV_HOST_PUBLIC: &str = "SL_JOB_HOST_PUBKEY";

/// One key pair: the public half (`ssh-ed25519 AAAA… comment`), the private half (OpenSSH
/// format), which prints as `<set>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshKeyPair {
    pub public: String,
    pub private: Secret,
}

/// The job's client identity and host identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSshKeys {
    pub client: SshKeyPair,
    pub host: SshKeyPair,
}

/// What a dry run plans with: a launch generates the real keys (the plan prints `<set>`
/// for every half either way). A container started with these fails closed: no sshd accepts
/// them as keys.
const NOT_GENERATED: &str = "not-generated-by-a-dry-run";

/// Open MPI's `plm_rsh_args` for a job whose sshd listens on `port`: the job's key only and
/// the job's host key only (the entrypoint's ssh config says the same for every peer).
pub fn rsh_args(port: u16) -> String {
    format!(
        "-p {port} -i {CLIENT_KEY_FILE} -o IdentitiesOnly=yes -o UserKnownHostsFile={KNOWN_HOSTS_FILE} -o StrictHostKeyChecking=yes"
    )
}

/// The `mpirun` options that make Open MPI reach the other containers with the job's
/// identity: [`rsh_args`], and no tree spawn (only the head, which holds the client key,
/// starts remote daemons; the workers never ssh anywhere).
pub fn mpirun_ssh_options(port: u16) -> Vec<String> {
    vec![
        "--mca".to_string(),
        "plm_rsh_args".to_string(),
        rsh_args(port),
        "--mca".to_string(),
        "plm_rsh_no_tree_spawn".to_string(),
        "1".to_string(),
    ]
}

impl JobSshKeys {
    /// Stand-ins for a dry run (and for plans made without the pre-plan step).
    pub fn placeholder() -> Self {
        let pair = |what: &str| SshKeyPair {
            public: format!("ssh-ed25519 {NOT_GENERATED} spark-launch-job-{what}"),
            private: Secret::placeholder(NOT_GENERATED),
        };
        JobSshKeys {
            client: pair("client"),
            host: pair("host"),
        }
    }

    /// Gives `spec` the job's identity: both public halves, the host's private key (every
    /// container with sshd), and with `runs_mpirun` the client's private key.
    pub fn add_to(&self, spec: &mut ContainerSpec, runs_mpirun: bool) {
        spec.env
            .insert(ENV_CLIENT_PUBLIC.to_string(), self.client.public.clone());
        spec.env
            .insert(ENV_HOST_PUBLIC.to_string(), self.host.public.clone());
        spec.env
            .insert("SL_JOB_SSH".to_string(), JOB_SSH_DIR.to_string());
        spec.secret_files.push(SecretFile {
            path: HOST_KEY_FILE.to_string(),
            mode: 0o600,
            content: self.host.private.clone(),
        });
        if runs_mpirun {
            spec.secret_files.push(SecretFile {
                path: CLIENT_KEY_FILE.to_string(),
                mode: 0o600,
                content: self.client.private.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{NodeName, Role};
    use crate::plan::JobName;

    fn spec() -> ContainerSpec {
        ContainerSpec::new(
            &JobName::new("j").unwrap(),
            &NodeName::new("a").unwrap(),
            Role::Head,
            "img",
        )
    }

    #[test]
    fn the_head_gets_both_private_keys_and_a_worker_only_the_host_key() {
        let keys = JobSshKeys::placeholder();
        let mut head = spec();
        keys.add_to(&mut head, true);
        let mut worker = spec();
        keys.add_to(&mut worker, false);
        let paths = |s: &ContainerSpec| -> Vec<String> {
            s.secret_files.iter().map(|f| f.path.clone()).collect()
        };
        assert_eq!(paths(&head), vec![HOST_KEY_FILE, CLIENT_KEY_FILE]);
        assert_eq!(paths(&worker), vec![HOST_KEY_FILE]);
        assert!(head.secret_files.iter().all(|f| f.mode == 0o600));
        assert_eq!(worker.env[ENV_CLIENT_PUBLIC], keys.client.public);
        assert_eq!(worker.env[ENV_HOST_PUBLIC], keys.host.public);
    }

    #[test]
    fn a_plan_prints_no_half_of_the_keys() {
        let keys = JobSshKeys {
            client: SshKeyPair {
                public: "ssh-ed25519 AAAAclientpublic c".into(),
                private: Secret::new("-----BEGIN OPENSSH PRIVATE KEY-----client").unwrap(),
            },
            host: SshKeyPair {
                public: "ssh-ed25519 AAAAhostpublic h".into(),
                private: Secret::new("-----BEGIN OPENSSH PRIVATE KEY-----host").unwrap(),
            },
        };
        let mut head = spec();
        keys.add_to(&mut head, true);
        let json = serde_json::to_string(&head).unwrap();
        let debug = format!("{head:?}");
        for text in [&json, &debug] {
            assert!(!text.contains("PRIVATE KEY"), "{text}");
        }
        assert!(!json.contains("AAAA"), "{json}");
        assert!(json.contains(r#""content":"<set>""#), "{json}");
    }
}
