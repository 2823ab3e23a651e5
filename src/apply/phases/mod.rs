//! The executor's phases, one per file (kind's actions): each is a step of a plan carried out
//! on the nodes, with one status line, and an optional clean-up. `executor::phases_for` builds
//! the list from a plan; `context::ApplyContext` is what they share.

mod check_nccl;
mod check_ports;
mod check_reachable;
mod connect;
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

pub use check_nccl::CheckNccl;
pub use check_ports::CheckPorts;
pub use check_reachable::CheckReachable;
pub use connect::Connect;
pub use ensure_image::EnsureImage;
pub use exec::Exec;
pub use name_free::NameFree;
pub use stage_model::StageModel;
pub use stage_nccl::StageNccl;
pub use start::Start;
pub use stop::Stop;
pub use wait_exit::WaitExit;
pub use wait_http::WaitHttp;
pub use wait_ray::WaitRay;
pub use wait_serving::WaitServing;
pub use write_file::WriteFile;
