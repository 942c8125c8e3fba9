//! Connecting QPs: the out-of-band TCP exchange ([`exchange`]), rdma_cm
//! ([`cm`], feature `verbs`), and how connection setup waits for a file
//! descriptor ([`cm_wait`]).

#[cfg(feature = "verbs")]
pub mod cm;
pub(crate) mod cm_wait;
pub mod exchange;
