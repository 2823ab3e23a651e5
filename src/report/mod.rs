//! Reads what tools printed and turns it into results and verdicts: the nccl-tests parser,
//! perftest's parser and twin-pair verdicts, bandwidth verdicts, tables and JSON. Parsers are
//! pure functions of text, pictures ([`plot`]) pure functions of results to SVG text; nothing
//! here runs a process, opens a socket or writes a file. [`shown`]: the one shape every
//! command's result is shown in (text, JSON, how it ends); [`facts`]: a probe's facts as tables.

pub mod facts;
pub mod live;
pub mod nccl;
pub mod perftest;
pub mod plot;
pub mod shown;
