//! Reads what tools printed and turns it into results and verdicts: the nccl-tests parser,
//! bandwidth verdicts, tables and JSON. Parsers are pure functions of text; nothing here runs
//! a process, opens a socket or writes a file.

pub mod nccl;
