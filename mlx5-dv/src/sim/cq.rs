//! CQs: creating one, its handle ([`Cq`]: events, overrun, the raw
//! description), and writing CQEs into it (overrun, completion events).

use super::channel::{Channel, ChannelShared};
use super::dma::DmaBuf;
use super::{CqEntry, Device, SimError, State};
use crate::cqe::{owner_bit, Cqe};
use crate::doorbell::{CQ_DBREC_CI, CQ_UAR_DOORBELL};
use crate::dv::mlx5dv_cq;
use crate::mmio;
use crate::prm::CQE64;
use std::sync::Arc;

impl Device {
    /// Creates a CQ of `cqe_cnt` entries (power of two, 2..=4M) of `cqe_size`
    /// (64 or 128) bytes that detects overrun: a CQE that finds no slot
    /// released through the consumer-index record stops the CQ.
    pub fn create_cq(&self, cqe_cnt: u32, cqe_size: u32) -> Result<Cq, SimError> {
        self.create_cq_ex(cqe_cnt, cqe_size, false)
    }

    /// [`Self::create_cq`], and with `ignore_overrun` a CQ created as
    /// `ibv_create_cq_ex` with `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN` makes one
    /// on mlx5 (the CQ context's `oi` bit): the device never reads the
    /// consumer-index record (word 0 of the CQ doorbell record) and writes
    /// each CQE into the next slot whether or not the host has consumed it,
    /// so the host need not write that record per poll; keeping the CQ from
    /// overrunning is then the host's job (CQ credits).
    pub fn create_cq_ex(
        &self,
        cqe_cnt: u32,
        cqe_size: u32,
        ignore_overrun: bool,
    ) -> Result<Cq, SimError> {
        self.make_cq(cqe_cnt, cqe_size, ignore_overrun, None)
    }

    /// [`Self::create_cq_ex`] on a completion channel that other CQs may
    /// share (`ibv_create_cq`'s `channel` and `cq_context`): the CQ's
    /// completion events go to `channel`, each naming it by `context`
    /// ([`Channel::get_event`]), and not to the CQ's own event fd or waker.
    pub fn create_cq_on(
        &self,
        cqe_cnt: u32,
        cqe_size: u32,
        ignore_overrun: bool,
        channel: &Channel,
        context: u64,
    ) -> Result<Cq, SimError> {
        self.make_cq(
            cqe_cnt,
            cqe_size,
            ignore_overrun,
            Some((channel.shared.clone(), context)),
        )
    }

    fn make_cq(
        &self,
        cqe_cnt: u32,
        cqe_size: u32,
        ignore_overrun: bool,
        channel: Option<(Arc<ChannelShared>, u64)>,
    ) -> Result<Cq, SimError> {
        if !cqe_cnt.is_power_of_two() || !(2..=1 << 22).contains(&cqe_cnt) {
            return Err(SimError::BadSize {
                what: "cqe_cnt",
                value: cqe_cnt,
                min: 2,
                max: 1 << 22,
            });
        }
        if cqe_size != 64 && cqe_size != 128 {
            return Err(SimError::BadSize {
                what: "cqe_size",
                value: cqe_size,
                min: 64,
                max: 128,
            });
        }
        let buf = DmaBuf::new(cqe_cnt as usize * cqe_size as usize);
        for i in 0..cqe_cnt as usize {
            // Every slot starts INVALID with owner 0 (op_own = 0xF0).
            buf.write(i * cqe_size as usize + cqe_size as usize - 1, &[0xf0]);
        }
        let events = Arc::new(
            nix::sys::eventfd::EventFd::from_value_and_flags(
                0,
                nix::sys::eventfd::EfdFlags::EFD_NONBLOCK
                    | nix::sys::eventfd::EfdFlags::EFD_CLOEXEC,
            )
            .map_err(|e| SimError::Os(format!("eventfd: {e}")))?,
        );
        let waker = Arc::new(std::sync::Mutex::new(None));
        let mut st = self.lock();
        // CQNs are 24 bits; skip numbers in use after a wrap.
        let start = st.next_cqn;
        let mut cqn = start;
        while st.cqs.contains_key(&cqn) || cqn == 0 {
            cqn = (cqn + 1) & 0xff_ffff;
            if cqn == start {
                return Err(SimError::Exhausted { what: "CQ" });
            }
        }
        st.next_cqn = (cqn + 1) & 0xff_ffff;
        st.cqs.insert(
            cqn,
            CqEntry {
                cqn,
                buf,
                dbrec: DmaBuf::new(64),
                uar: DmaBuf::new(4096),
                cqe_cnt,
                cqe_size,
                pi: 0,
                ignore_overrun,
                overrun: false,
                error_events: 0,
                completion_events: 0,
                event_sn: 0,
                event_fd: events.clone(),
                waker: waker.clone(),
                channel,
                refs: 1,
                compress: false,
                held: Default::default(),
                cqe_bytes: 0,
                clock: None,
            },
        );
        Ok(Cq {
            dev: self.clone(),
            cqn,
            events,
            waker,
        })
    }
}

/// A sim CQ; destroyed on drop.
pub struct Cq {
    pub(super) dev: Device,
    pub(super) cqn: u32,
    events: Arc<nix::sys::eventfd::EventFd>,
    waker: Arc<std::sync::Mutex<Option<std::task::Waker>>>,
}

impl Cq {
    /// The CQ number (24 bits).
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// Whether a CQE found no free slot (the consumer index in the doorbell
    /// record had not released it): the CQ then stopped, writing no more
    /// CQEs, and raised a CQ error event. QPs completing to it stop too.
    /// Never on a CQ that ignores overrun (the device does not look).
    pub fn overrun(&self) -> bool {
        self.dev.lock().cqs[&self.cqn].overrun
    }

    /// Whether the CQ ignores overrun ([`Device::create_cq_ex`]).
    pub fn ignores_overrun(&self) -> bool {
        self.dev.lock().cqs[&self.cqn].ignore_overrun
    }

    /// Test hook (no verbs call does this on mlx5): from now on the CQ
    /// ignores overrun or, with `false`, detects it as [`Device::create_cq`]'s
    /// do, reading the consumer-index record before each CQE. The host must
    /// have written that record first (a stale one reads as a full CQ).
    pub fn set_ignore_overrun(&self, ignore: bool) {
        self.dev
            .lock()
            .cqs
            .get_mut(&self.cqn)
            .expect("a live CQ")
            .ignore_overrun = ignore;
    }

    /// Turns CQE compression on (or off) for this CQ: the sim's side of
    /// `mlx5dv_create_cq` with `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`
    /// (call it before the CQ's first CQE, as creation would). The sim then
    /// writes runs of CQEs as compressed sessions in the basic layout
    /// ([`crate::mini_cqe`]; the model is documented in `sim/session.rs`); a
    /// poller must expand them ([`crate::driver::CompletionQueue`] does).
    /// A session takes as many slots as it has completions (the title's
    /// among them), and the sim compresses only when the consumer-index
    /// record shows room for the whole session.
    ///
    /// Errors: [`SimError::Unsupported`] on a CQ of 128-byte CQEs (the
    /// sim models 64-byte slots only; our choice). Turning it off writes a
    /// session held.
    pub fn set_compression(&self, on: bool) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let c = st.cqs.get_mut(&self.cqn).expect("a live CQ");
        if on && c.cqe_size != 64 {
            return Err(SimError::Unsupported {
                what: "CQE compression on a CQ of 128-byte CQEs",
            });
        }
        if on && c.clock.is_some() {
            return Err(SimError::Unsupported {
                what: "CQE compression on a CQ with completion timestamps",
            });
        }
        c.compress = on;
        if !on {
            super::session::write_held(&mut st);
        }
        Ok(())
    }

    /// Turns completion timestamps on (or off) for this CQ: the sim's side
    /// of `ibv_create_cq_ex(3)` with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`
    /// in `wc_flags` (call it before the CQ's first CQE, as creation
    /// would). Every CQE written from then on carries in `timestamp` (bytes
    /// 48..56 of the CQE proper, big-endian, [`crate::cqe::TIMESTAMP`]) the
    /// device's clock when it was written: nanoseconds since the sim
    /// device was made (a monotonic clock; at least 1), where ConnectX
    /// writes ticks of its free-running clock. Error CQEs carry none (their
    /// syndromes lie in those bytes). Off (the default), the field is 0.
    ///
    /// Errors: [`SimError::Unsupported`] on a CQ that compresses (the
    /// sim's choice: mini-CQEs carry no timestamp of their own).
    pub fn set_timestamps(&self, on: bool) -> Result<(), SimError> {
        let mut st = self.dev.lock();
        let epoch = st.epoch;
        let c = st.cqs.get_mut(&self.cqn).expect("a live CQ");
        if on && c.compress {
            return Err(SimError::Unsupported {
                what: "completion timestamps on a CQ that compresses CQEs",
            });
        }
        c.clock = on.then_some(epoch);
        Ok(())
    }

    /// Whether the CQ's CQEs carry timestamps ([`Self::set_timestamps`]).
    pub fn timestamps(&self) -> bool {
        self.dev.lock().cqs[&self.cqn].clock.is_some()
    }

    /// Whether the CQ compresses ([`Self::set_compression`]).
    pub fn compresses(&self) -> bool {
        self.dev.lock().cqs[&self.cqn].compress
    }

    /// CQE bytes the sim has written into this CQ's ring: `cqe_size` per
    /// CQE written whole; for a compressed session 64 for the title and 64
    /// per mini-CQE array, not per completion (what crosses PCIe on a NIC).
    pub fn cqe_bytes_written(&self) -> u64 {
        self.dev.lock().cqs[&self.cqn].cqe_bytes
    }

    /// A file descriptor that becomes readable when the CQ raises a
    /// completion event (as a verbs completion channel's fd): wait on it with
    /// `poll`, then [`Self::take_events`].
    pub fn event_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.events.as_fd()
    }

    /// Has `waker` woken by the next completion event (once; a later call
    /// replaces it), after the event fd is written: so an async wait
    /// registers, then reads the fd ([`Self::take_events`]) for an event
    /// that came first, and sleeps only if there was none. No `poll(2)`
    /// (which Miri does not run).
    pub fn wake_on_event(&self, waker: &std::task::Waker) {
        let mut w = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        match &*w {
            Some(old) if old.will_wake(waker) => {}
            _ => *w = Some(waker.clone()),
        }
    }

    /// Consumes the completion events raised since the last call; returns
    /// how many (0 if none).
    pub fn take_events(&self) -> u64 {
        self.events.read().unwrap_or(0)
    }

    /// Completion events raised (what `ibv_get_cq_event` would return).
    pub fn completion_events(&self) -> u64 {
        self.dev.lock().cqs[&self.cqn].completion_events
    }

    /// CQ error events raised (`IBV_EVENT_CQ_ERR` in verbs).
    pub fn error_events(&self) -> u64 {
        self.dev.lock().cqs[&self.cqn].error_events
    }

    /// The raw description, as `mlx5dv_init_obj` would return it. Valid while `self` lives.
    /// Test hook: the 64-byte CQE proper in slot `i` (modulo the depth),
    /// as the device wrote it.
    pub fn hook_read_cqe(&self, i: u32) -> [u8; CQE64] {
        let st = self.dev.lock();
        let c = &st.cqs[&self.cqn];
        let off =
            (i & (c.cqe_cnt - 1)) as usize * c.cqe_size as usize + c.cqe_size as usize - CQE64;
        c.buf.read_array(off)
    }

    /// Test hook (feature `test-hooks`): writes CQE `c` of a QP whose user
    /// index is `uidx` as the device writes every CQE (`push_cqe`: the next
    /// slot, its owner bit, the user index, `op_own` published last; an
    /// overrun or an armed event as for any CQE), so that a test can poll
    /// the very bytes the sim writes without executing WQEs for them. On a
    /// CQ that compresses it may be held in a session
    /// ([`Cq::set_compression`]) until the next [`Device::process`].
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn hook_push_cqe(&self, c: &Cqe, uidx: u32) {
        push_cqe_to(&mut self.dev.lock(), self.cqn, c, uidx);
    }

    /// Test hook (feature `test-hooks`): moves the CQ's producer index to
    /// `pi`, as if `pi` CQEs had been written since it was made (the next
    /// CQE goes to slot `pi % cqe_cnt` with the owner bit of that pass).
    /// Nothing is written.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn hook_start_at(&self, pi: u32) {
        self.dev
            .lock()
            .cqs
            .get_mut(&self.cqn)
            .expect("a live CQ")
            .pi = pi;
    }

    /// The raw description, as `mlx5dv_init_obj` would return it. Valid while `self` lives.
    pub fn dv(&self) -> mlx5dv_cq {
        let st = self.dev.lock();
        let c = &st.cqs[&self.cqn];
        mlx5dv_cq {
            buf: c.buf.ptr().cast(),
            dbrec: c.dbrec.ptr().cast(),
            cqe_cnt: c.cqe_cnt,
            cqe_size: c.cqe_size,
            cq_uar: c.uar.ptr().cast(),
            cqn: self.cqn,
            comp_mask: 0,
        }
    }
}

impl Drop for Cq {
    /// The CQ's events go from its shared channel now, though QPs may keep
    /// the CQ a while: no one is left to take them (its owner arms it no
    /// more, and a CQ made later may carry the same context value).
    fn drop(&mut self) {
        let mut st = self.dev.lock();
        if let Some((ch, _)) = st.cqs.get_mut(&self.cqn).and_then(|c| c.channel.take()) {
            ch.forget(self.cqn);
        }
        release_cq(&mut st, self.cqn);
    }
}

/// Drops one reference to CQ `cqn`; the last one destroys it.
pub(super) fn release_cq(st: &mut State, cqn: u32) {
    if let Some(c) = st.cqs.get_mut(&cqn) {
        c.refs -= 1;
        if c.refs == 0 {
            if let Some((ch, _)) = st.cqs.remove(&cqn).and_then(|c| c.channel) {
                ch.forget(cqn);
            }
        }
    }
}

/// Whether the next CQE finds no free slot: producer index minus the
/// consumer index in the CQ doorbell record reaches `cqe_cnt`. Never for a
/// CQ that ignores overrun, which does not read the record.
fn cq_full(cq: &CqEntry) -> bool {
    !cq.ignore_overrun && cq_room(cq) == 0
}

/// Free slots by the consumer-index record (word 0 of the CQ doorbell
/// record): `cqe_cnt - (pi - ci)`, 0 when the record says the CQ is full or
/// past it. On a CQ that ignores overrun the host writes the record only
/// now and then, so this is a lower bound there.
pub(super) fn cq_room(cq: &CqEntry) -> u32 {
    // SAFETY: the CQ dbrec DmaBuf is 64 bytes, 4096-aligned; word 0 is the consumer index.
    let ci =
        unsafe { mmio::read_dbrec((cq.dbrec.ptr() as *const u32).add(CQ_DBREC_CI)) } & 0xff_ffff;
    cq.cqe_cnt
        .saturating_sub(cq.pi.wrapping_sub(ci) & 0xff_ffff)
}

/// Writes CQE `c` of a QP whose user index is `uidx` into CQ `cqn`; an
/// overrun it causes raises `AsyncEvent::CqError` too. On a CQ that
/// compresses, `c` may be held as part of a session instead
/// ([`super::session`]), written when the run breaks or the pass ends.
pub(super) fn push_cqe_to(st: &mut State, cqn: u32, c: &Cqe, uidx: u32) {
    let cq = st.cqs.get_mut(&cqn).expect("cq");
    let before = cq.error_events;
    let held = cq.compress && super::session::hold(cq, c, uidx);
    if !held {
        push_cqe(cq, c, uidx);
    }
    let list = held && cq.held.take_listing();
    let overran = cq.error_events != before;
    if list {
        st.held_cqs.push(cqn);
    }
    if overran {
        super::srq::raise(st, super::AsyncEvent::CqError { cqn });
    }
}

/// Writes CQE `c` of a QP whose user index is `uidx` (version-1 CQEs carry
/// it in `srqn_uidx`, bytes 32..36, low 24 bits) into the next slot, unless
/// that slot has not been released through the consumer index: then the CQ
/// overruns (PRM: the CQ moves to error and raises a CQ error event) and
/// neither this nor any later CQE is written. A CQ that ignores overrun
/// writes the slot whatever it holds.
pub(super) fn push_cqe(cq: &mut CqEntry, c: &Cqe, uidx: u32) {
    let mut bytes = c.encode(0);
    bytes[32..36].copy_from_slice(&(uidx & 0xff_ffff).to_be_bytes());
    stamp(cq, c, &mut bytes);
    if write_cqe(cq, &mut bytes) {
        raise_if_armed(cq, c.solicited || c.opcode.is_error());
    }
}

/// On a CQ with timestamps on ([`Cq::set_timestamps`]): the device clock
/// now, in nanoseconds since its epoch (at least 1), into the `timestamp`
/// (bytes 48..56, big-endian) of `c`'s encoding `bytes`. Not into an error
/// CQE, whose syndromes lie there (`struct mlx5_err_cqe`, bytes 52..56).
fn stamp(cq: &CqEntry, c: &Cqe, bytes: &mut [u8; CQE64]) {
    if let (Some(epoch), false) = (cq.clock, c.opcode.is_error()) {
        let ns = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let at = crate::cqe::TIMESTAMP;
        bytes[at..at + 8].copy_from_slice(&ns.max(1).to_be_bytes());
    }
}

/// Writes the 64-byte CQE proper `bytes` into the next slot, its owner bit
/// set to that slot's lap, `op_own` published last; false (nothing
/// written) when the CQ has overrun or does now.
pub(super) fn write_cqe(cq: &mut CqEntry, bytes: &mut [u8; CQE64]) -> bool {
    if cq.overrun {
        return false;
    }
    if cq_full(cq) {
        cq.overrun = true;
        cq.error_events += 1;
        return false;
    }
    bytes[63] = (bytes[63] & !1) | owner_bit(cq.pi, cq.cqe_cnt);
    let off =
        (cq.pi & (cq.cqe_cnt - 1)) as usize * cq.cqe_size as usize + cq.cqe_size as usize - CQE64;
    cq.buf.write(off, &bytes[..63]);
    cq.buf.publish_op_own(off + 63, bytes[63]);
    cq.pi = cq.pi.wrapping_add(1);
    cq.cqe_bytes += cq.cqe_size as u64;
    true
}

/// After CQEs were written (one, or a compressed session): raises the
/// completion event if the CQ is armed for it; `solicited` says whether
/// what was written is solicited or an error (what a solicited-only arm
/// waits for).
pub(super) fn raise_if_armed(cq: &mut CqEntry, solicited: bool) {
    // The CQE is written before the arm is read (a full fence: the host
    // arms, fences, then polls; with both fences one of the two sides sees
    // the other's write, so a completion never goes without either a poll
    // that finds it or an event).
    mmio::store_load_barrier();
    // Armed? The last arm doorbell (8 bytes big-endian at UAR + 0x20: arm
    // word << 32 | CQN, rdma-core `mlx5_arm_cq`) names this CQ and carries
    // the sequence number the next event answers. Then this CQE raises the
    // event, unless the arm asked for solicited completions only and it is
    // neither solicited nor an error.
    // SAFETY: the UAR page is 4096 bytes, 4096-aligned, and lives with `cq`;
    // the host writes the register atomically (`mmio::write_uar_doorbell`).
    let db =
        u64::from_be(unsafe { mmio::read_uar_doorbell(cq.uar.ptr().add(CQ_UAR_DOORBELL).cast()) });
    let arm = (db >> 32) as u32;
    if db as u32 == cq.cqn && (arm >> 28) & 3 == cq.event_sn & 3 {
        let solicited_only = arm & (1 << 24) != 0;
        if !solicited_only || solicited {
            cq.completion_events += 1;
            cq.event_sn = cq.event_sn.wrapping_add(1);
            if let Some((ch, context)) = &cq.channel {
                ch.raise(cq.cqn, *context);
                return;
            }
            // A full counter (2^64 - 2 unread events) cannot happen here.
            let _ = cq.event_fd.write(1);
            let w = cq.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(w) = w {
                w.wake();
            }
        }
    }
}

/// [`push_cqe_to`] for a CQE that carries `data` (scatter to CQE,
/// `scatter.rs`; never compressed): on a CQ of 64-byte CQEs at most 32
/// bytes, in bytes 0..32 of the CQE proper, `op_own` bit 0x4
/// (`MLX5_INLINE_SCATTER_32`); on one of 128-byte CQEs at most 64, in the
/// slot's first 64 bytes, before the CQE proper, bit 0x8
/// (`MLX5_INLINE_SCATTER_64`). The data is written before `op_own` is
/// published. Overrun and events as for any CQE.
pub(super) fn push_cqe_with_data(st: &mut State, cqn: u32, c: &Cqe, uidx: u32, data: &[u8]) {
    let cq = st.cqs.get_mut(&cqn).expect("cq");
    let before = cq.error_events;
    if cq.compress {
        // A session held before it is written first: CQEs in order.
        super::session::write_pending(cq);
    }
    push_cqe_data(cq, c, uidx, data);
    if cq.error_events != before {
        super::srq::raise(st, super::AsyncEvent::CqError { cqn });
    }
}

fn push_cqe_data(cq: &mut CqEntry, c: &Cqe, uidx: u32, data: &[u8]) {
    use crate::cqe::{INLINE_SCATTER_32, INLINE_SCATTER_64};
    let slot128 = cq.cqe_size == 128;
    assert!(
        data.len() <= if slot128 { 64 } else { 32 },
        "scatter data too long"
    );
    if cq.overrun {
        return;
    }
    if cq_full(cq) {
        cq.overrun = true;
        cq.error_events += 1;
        return;
    }
    let mut bytes = c.encode(owner_bit(cq.pi, cq.cqe_cnt));
    bytes[32..36].copy_from_slice(&(uidx & 0xff_ffff).to_be_bytes());
    stamp(cq, c, &mut bytes);
    let slot = (cq.pi & (cq.cqe_cnt - 1)) as usize * cq.cqe_size as usize;
    let off = slot + cq.cqe_size as usize - CQE64;
    if slot128 {
        bytes[63] |= INLINE_SCATTER_64;
        cq.buf.write(slot, data);
    } else {
        bytes[63] |= INLINE_SCATTER_32;
        // Over whatever the CQE proper holds there (flags_rqpn at 24 among
        // them), as the device overlays it.
        bytes[..data.len()].copy_from_slice(data);
    }
    cq.buf.write(off, &bytes[..63]);
    cq.buf.publish_op_own(off + 63, bytes[63]);
    cq.pi = cq.pi.wrapping_add(1);
    cq.cqe_bytes += cq.cqe_size as u64;
    raise_if_armed(cq, c.solicited || c.opcode.is_error());
}
