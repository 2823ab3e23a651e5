//! Named, independent checks of a cluster, each with a stable id, a plain-language failure text
//! and the fix. Checks over facts are pure; checks that need the network run through `ssh`.
