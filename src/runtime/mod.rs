//! Runs containers (Docker Engine through bollard, local or over an SSH-forwarded socket) or
//! plain host processes. It only talks to engines and processes; it decides nothing.
