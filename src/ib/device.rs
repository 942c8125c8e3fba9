//! What a device is: its name, kind, ports and GIDs, and the data path its
//! QPs take.

/// Name of the embedded software mlx5 device.
pub const SIM_DEVICE: &str = "sim";

/// One device `rdma-direct devices` lists.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// The name [`Context::open`](crate::Context::open) takes: `ibv_get_device_name`
    /// (`mlx5_0`, `rxe0`, ...) or [`SIM_DEVICE`].
    pub name: String,
    /// `sim`, or `verbs` for an ibverbs device.
    pub kind: &'static str,
    /// Kernel driver (`mlx5_core`, `rdma_rxe (on eth0)`, ...; `sim`).
    pub driver: String,
    /// Node GUID (0 for the sim).
    pub node_guid: u64,
    /// The data path its QPs use (what [`Backend::Auto`] picks).
    pub data_path: DataPath,
    /// Its ports. Empty when the device could not be opened (`error` says why).
    pub ports: Vec<PortDetail>,
    /// Why the device's ports could not be read.
    pub error: Option<String>,
    /// Its on-demand paging caps (all empty when the device could not be
    /// opened, and on a device without ODP: rxe).
    pub odp: OdpCaps,
}

bitflags::bitflags! {
    /// What one transport may do with ODP memory (`enum
    /// ibv_odp_transport_cap_bits`, libibverbs `verbs.h`; the bits of
    /// `ibv_odp_caps.per_transport_caps.{rc,uc,ud}_odp_caps`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct OdpOps: u32 {
        /// `IBV_ODP_SUPPORT_SEND`: a SEND's source may be ODP memory.
        const SEND = 1;
        /// `IBV_ODP_SUPPORT_RECV`: a receive's buffer may be.
        const RECV = 2;
        /// `IBV_ODP_SUPPORT_WRITE`: an RDMA WRITE's target (and source).
        const WRITE = 4;
        /// `IBV_ODP_SUPPORT_READ`: an RDMA READ's target (and source).
        const READ = 8;
        /// `IBV_ODP_SUPPORT_ATOMIC`: an atomic's target.
        const ATOMIC = 16;
        /// `IBV_ODP_SUPPORT_SRQ_RECV`: a receive's buffer posted to an SRQ.
        const SRQ_RECV = 32;
    }
}

/// A device's on-demand paging caps: `ibv_query_device_ex(3)`'s
/// `struct ibv_odp_caps` on a verbs device, the sim's model on the sim
/// (`mlx5_dv::sim::Device::odp_caps`). Registrations with
/// [`Access::ON_DEMAND`](crate::Access::ON_DEMAND) are refused where
/// [`Self::supported`] is false, implicit ones
/// ([`Pd::reg_implicit_odp`](crate::Pd::reg_implicit_odp)) where
/// [`Self::implicit`] is; the per-transport bits are reported, not
/// enforced (the device decides per operation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OdpCaps {
    /// `IBV_ODP_SUPPORT` in `general_caps`: ODP registrations at all.
    pub supported: bool,
    /// `IBV_ODP_SUPPORT_IMPLICIT` in `general_caps`: the whole address
    /// space as one registration.
    pub implicit: bool,
    /// RC's operations on ODP memory (`rc_odp_caps`).
    pub rc: OdpOps,
    /// UC's (`uc_odp_caps`).
    pub uc: OdpOps,
    /// UD's (`ud_odp_caps`).
    pub ud: OdpOps,
}

/// One port of a device.
#[derive(Clone, Debug)]
pub struct PortDetail {
    /// Port number, from 1 (`ibv_query_port`'s `port_num`).
    pub port: u8,
    /// `ACTIVE`, `DOWN`, ... (`enum ibv_port_state`).
    pub state: &'static str,
    /// `InfiniBand`, `Ethernet` (RoCE) or `sim`.
    pub link_layer: &'static str,
    /// Active MTU in bytes (`None` on the sim, which has no wire).
    pub active_mtu: Option<u32>,
    /// Active rate in Gb/s (lanes x lane speed).
    pub rate_gbps: Option<f64>,
    /// The port's LID, host order (`struct ibv_port_attr` `lid`; 0 on RoCE and the sim).
    pub lid: u16,
    /// Non-empty GID table entries.
    pub gids: Vec<GidEntry>,
}

/// One GID table entry.
#[derive(Clone, Debug)]
pub struct GidEntry {
    /// Index in the port's GID table (`ibv_query_gid`'s `index`; a QP's `sgid_index`).
    pub index: u32,
    /// The GID, 16 bytes in network byte order (`union ibv_gid` `raw`).
    pub gid: [u8; 16],
    /// `RoCE v2`, `IB/RoCE v1`, or `IB` (from sysfs `gid_attrs/types`).
    pub kind: String,
}

/// The data path a QP posts and polls on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataPath {
    /// Our ring driver writes the WQEs and reads the CQEs (mlx5: the sim,
    /// ConnectX through `mlx5dv_init_obj`).
    Direct,
    /// rdma-core's `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`.
    Verbs,
}

impl DataPath {
    /// `direct` or `verbs`: the name the CLI, its JSON and the docs use.
    pub fn as_str(self) -> &'static str {
        match self {
            DataPath::Direct => "direct",
            DataPath::Verbs => "verbs",
        }
    }
}

impl std::fmt::Display for DataPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which data path a device's QPs use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    /// The direct path (our ring driver) on the sim and on ConnectX
    /// (`mlx5dv_is_supported`), verbs everywhere else.
    #[default]
    Auto,
    /// The direct path; a device that is not mlx5 (or the sim) is refused.
    Direct,
    /// `ibv_post_send` / `ibv_poll_cq`, even on mlx5 (for comparison). The
    /// sim has no verbs path.
    Verbs,
}
