//! The cluster file (`cluster.yaml`): the nodes the user configured or discovery saved, with
//! name, addresses, SSH user and port, and role. What the user wrote (`NodeConfig`), never live
//! connections or probed facts beyond a cached copy.
