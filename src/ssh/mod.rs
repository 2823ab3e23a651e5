//! The system OpenSSH client: one multiplexed connection per node, safely quoted commands,
//! copies, socket forwarding and key trust. Talks to sshd; decides nothing.
