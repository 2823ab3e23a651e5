//! Layouts that derive refuses, each naming the node, the interfaces involved and the fix.
//! Every violation in the cluster is collected and reported together, so one run shows every problem.

use std::fmt;

use serde::Serialize;

use crate::node::NodeName;
use crate::problem::Problem;

/// What is wrong with one node's fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViolationKind {
    /// Two fabric interfaces of one node have IPv4 addresses in the same subnet.
    TwinsSameSubnet,
    /// No RDMA device of the node is ACTIVE.
    NoActiveRdma,
    /// The node has no address the head can reach.
    Unreachable,
    /// Two nodes share a fabric address.
    DuplicateAddress,
    /// The node's addresses were not recorded (probed without `ip`): nothing can be derived.
    AddressesNotRecorded,
    /// A chosen RDMA device or interface has a name no variable can carry: NCCL's list syntax
    /// in it, or bytes that are not UTF-8.
    UnusableName,
}

/// One refused fact about one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub node: NodeName,
    pub kind: ViolationKind,
    #[serde(flatten)]
    pub problem: Problem,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.problem)
    }
}

/// The cluster's fabric layout cannot be used as it is. Exit code 2.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize)]
pub struct Refusal {
    pub violations: Vec<Violation>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.violations.len();
        write!(
            f,
            "refusing this fabric layout: {n} problem{}",
            if n == 1 { "" } else { "s" }
        )?;
        for v in &self.violations {
            write!(f, "\n  {v}")?;
        }
        Ok(())
    }
}
