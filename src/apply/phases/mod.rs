//! The executor's phases, one per file (kind's actions): each file makes one `plan::Step`
//! payload a [`Phase`](crate::apply::phase::Phase) (`impl Phase<ApplyContext> for plan::Start`),
//! carried out on the nodes with one status line and an optional clean-up; `Connect` and
//! `NameFree` are the two phases no step names. `executor::phases_for` builds the list from a
//! plan; `context::ApplyContext` is what they share.

mod check_nccl;
mod check_ports;
mod check_reachable;
mod connect;
mod ensure_folders;
mod ensure_image;
mod exec;
mod name_free;
mod stage_model;
mod stage_nccl;
mod start;
mod stop;
mod wait_exit;
mod wait_http;
mod wait_ray;
mod wait_serving;
mod write_file;

pub use connect::Connect;
pub use name_free::NameFree;
