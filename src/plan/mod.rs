//! A plan is plain data: the per-node container specs or host processes, and the order of
//! steps. Workloads build plans; `--dry-run` prints them; the executor runs exactly them.
//! Pure: no effects, no handles, no closures: a plan is data that can be printed, compared and kept.

pub mod image;
pub mod job;
pub mod layers;
pub mod secret;
pub mod spec;
pub mod step;

pub use image::{ImageFacts, PushAction, TargetFacts, push_actions};
pub use job::{JobPlan, Launch, NodePlan, ProcessSpec, RuntimeKind};
pub use spec::{ContainerSpec, Gpus, JobName, Ulimit};
pub use step::{
    CheckNccl, CheckPorts, CheckReachable, EnsureFolders, EnsureImage, Exec, NodePorts, RayMember,
    StageModel, StageNccl, Start, Step, StepPayload, Stop, WaitExit, WaitHttp, WaitRay,
    WaitServing, WriteFile,
};
