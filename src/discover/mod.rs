//! Finds the other boxes on the fast link by browsing mDNS (`_ssh._tcp`, as DGX OS publishes),
//! only on fabric interfaces. An effect at the edge: it reports what it saw and decides nothing.
