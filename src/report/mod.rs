//! Reads what tools printed and turns it into results and verdicts: the nccl-tests parser,
//! bandwidth verdicts, tables and JSON. Parsers are pure functions of text.
