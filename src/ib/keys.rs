//! Memory keys and remote addresses (IB spec 10.6.3).

/// Local key of a memory region. Only an [`Mr`](crate::Mr) makes one, so an rkey cannot stand in for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lkey(pub(crate) u32);

impl Lkey {
    /// The 32-bit lkey, as an SGE's `lkey` (`struct ibv_sge`) holds it.
    pub fn get(self) -> u32 {
        self.0
    }
}

/// Remote key of a (possibly remote) memory region, as the peer sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rkey(pub u32);

/// The remote side of an RDMA operation: an address and rkey the peer exposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteAddr {
    /// The virtual address in the peer's MR (`wr.rdma.remote_addr`), in bytes.
    pub addr: u64,
    /// The rkey of the peer's MR covering `addr` (`wr.rdma.rkey`).
    pub rkey: Rkey,
}
