//! Compressed CQE sessions (basic layout, [`mlx5_dv::mini_cqe`]) against
//! libmlx5's `mlx5_poll_cq_v1`, which never decompresses (issue 29 item
//! 2): every completion of a session, decompressed by our expansion, is
//! compared with libmlx5's parse of the equivalent full CQE.
//!
//! A case is one CQ of 64-byte slots (4 to 2^10 of them, the consumer
//! index anywhere, the slots ahead holding the previous pass's CQEs) and
//! one to four QPs (RC, UC or UD, each with its own RQ: a compressing CQ
//! serves no SRQ) with sends and receives posted on our side and on the
//! provider's, in two [`World`]s over the same case:
//!
//! - world A: our CQ ring gets each session as the device writes it
//!   ([`mini_cqe::write_session`]: title and mini-CQE arrays, the holes
//!   left as they were), which our poller expands in place as it meets
//!   the title; the provider's ring gets the equivalent full CQEs;
//! - world B: both rings get the equivalent full CQEs (the comparison of
//!   `cqe.rs`, on the CQEs a session stands for).
//!
//! The equivalent full CQE of completion `k` ([`full_cqe`]) is built field
//! by field from what the session was generated from, not from the ring or
//! by the expander: the title's bytes with completion `k`'s `byte_cnt`, its
//! `wqe_counter` (a requester's from its mini, a responder's the RQ index
//! of the receive it completes, which its mini does not carry) and a
//! requester's WQE opcode, format 0, the owner bit of its slot. A session
//! is 2 to `cqe_cnt` completions of one queue (requester: consecutive
//! signaled WQEs; responder: consecutive receives), its shared fields and
//! the fields no parser reads random; plain CQEs come between sessions.
//!
//! Per completion, both worlds' completions are compared with libmlx5's
//! ([`differences`]) and with each other; after each poll, the consumer
//! indices (A's the provider's: a session takes a slot a completion),
//! the SQs' retired WRs, the doorbell records; every session's slots, once
//! [`mini_cqe::expand_session`] on a copy of the ring and once our poller
//! expanded them in place, byte for byte against the full CQEs.

use super::oracle::{batch, World};
use super::*;
use crate::ffi::*;
use mlx5_dv::mini_cqe::{self, MiniCqe};

/// One completion of a session as generated: what its mini-CQE carries
/// (`hash` for a responder, `opcode` for a requester) and the
/// `wqe_counter` of the WQE it completes (a responder's mini does not
/// carry it: the receive's RQ index, to check the expansion's title + k).
#[derive(Clone, Copy, Debug)]
pub struct Mini {
    pub wqe_counter: u16,
    pub opcode: u8,
    pub byte_cnt: u32,
    pub hash: u32,
}

/// A session (or, of one completion, a plain CQE): `first` holds the
/// shared fields and completion 0's (owner bit 0, format 0).
#[derive(Clone, Debug)]
pub struct Session {
    pub first: [u8; 64],
    pub minis: Vec<Mini>,
    pub req: bool,
    /// The index in the case's QPs.
    pub qp: usize,
}

impl Session {
    fn mini_cqes(&self) -> Vec<MiniCqe> {
        let enc = |m: &Mini| match self.req {
            true => MiniCqe::requester(m.wqe_counter, m.opcode, m.byte_cnt),
            false => MiniCqe::responder(m.hash, m.byte_cnt),
        };
        self.minis.iter().map(enc).collect()
    }
}

/// The full CQE completion `k` of `s` stands for, field by field (see the
/// module's doc), with owner bit `owner`.
pub fn full_cqe(s: &Session, k: usize, owner: u8) -> [u8; 64] {
    let m = &s.minis[k];
    let mut c = s.first;
    c[44..48].copy_from_slice(&m.byte_cnt.to_be_bytes());
    if s.req {
        c[56] = m.opcode;
    }
    c[60..62].copy_from_slice(&m.wqe_counter.to_be_bytes());
    // Opcode and solicited bit kept; format 0; the slot's owner bit.
    c[63] = (s.first[63] & 0xf2) | (owner & 1);
    c
}

/// The shared fields of a session of QP `qp` whose completions are
/// `minis`: every byte random but those a parser reads as the QP's
/// (`srqn_uidx`'s user index, the QPN), `flags_rqpn` (a UD receive's
/// source, SL and GRH bits; 0 elsewhere) and completion 0's fields.
fn first(s: &mut impl Source, qp: &QpCase, op: CqeOpcode, m: &Mini) -> [u8; 64] {
    let mut b = [0u8; 64];
    for x in b.iter_mut() {
        *x = s.next_u64() as u8;
    }
    let ud_recv = qp.sq.qp_type == ibv::QPT_UD && op != CqeOpcode::REQ;
    let flags_rqpn = if ud_recv {
        let g = if s.chance(70) { 1 } else { s.range(0, 3) };
        let sl = if s.chance(70) { 0 } else { s.range(0, 15) };
        (g << 28 | sl << 24 | s.range(0, 0xff_ffff)) as u32
    } else {
        0
    };
    b[24..28].copy_from_slice(&flags_rqpn.to_be_bytes());
    b[33..36].copy_from_slice(&qp.uidx.to_be_bytes()[1..]);
    b[44..48].copy_from_slice(&m.byte_cnt.to_be_bytes());
    b[57..60].copy_from_slice(&qp.sq.qpn.to_be_bytes()[1..]);
    if op == CqeOpcode::REQ {
        b[56] = m.opcode;
    }
    b[60..62].copy_from_slice(&m.wqe_counter.to_be_bytes());
    b[63] = op.0 << 4 | (s.chance(25) as u8) << 1;
    b
}

/// What is left to complete: per QP, the next send (index into its
/// signaled sends) and the next receive.
struct Pending {
    sends: Vec<Vec<SentWqe>>,
    recvs: Vec<Vec<u32>>,
    at: Vec<(usize, usize)>,
}

impl Pending {
    fn new(posted: &Posted) -> Self {
        let sends: Vec<Vec<SentWqe>> = posted
            .sends
            .iter()
            .map(|v| v.iter().copied().filter(|w| w.signaled).collect())
            .collect();
        let at = vec![(0, 0); sends.len()];
        Pending {
            sends,
            recvs: posted.recvs.clone(),
            at,
        }
    }

    /// The next session, of up to `most` completions: `None` when nothing
    /// is left.
    fn session(&mut self, s: &mut impl Source, case: &Case, most: u32) -> Option<Session> {
        let mut queues = Vec::new();
        for (i, &(sa, ra)) in self.at.iter().enumerate() {
            if sa < self.sends[i].len() {
                queues.push((i, true, self.sends[i].len() - sa));
            }
            if ra < self.recvs[i].len() {
                queues.push((i, false, self.recvs[i].len() - ra));
            }
        }
        if queues.is_empty() {
            return None;
        }
        let (qp, req, left) = queues[s.range(0, queues.len() as u64 - 1) as usize];
        let most = (left as u64).min(most as u64);
        let n = match s.range(0, 9) {
            _ if most < 2 => 1,
            0 => 1,
            1 | 2 => most,
            3 => 2,
            _ => s.range(2, most),
        } as usize;
        let q = &case.qps[qp];
        let ud = q.sq.qp_type == ibv::QPT_UD;
        let minis: Vec<Mini> = if req {
            let at = self.at[qp].0;
            self.at[qp].0 += n;
            self.sends[qp][at..at + n]
                .iter()
                .map(|w| Mini {
                    wqe_counter: w.idx as u16,
                    opcode: w.opcode.0,
                    byte_cnt: match w.opcode {
                        WqeOpcode::ATOMIC_CS | WqeOpcode::ATOMIC_FA => 8,
                        _ if s.chance(50) => s.next_u64() as u32,
                        _ => w.bytes,
                    },
                    hash: 0,
                })
                .collect()
        } else {
            let at = self.at[qp].1;
            self.at[qp].1 += n;
            self.recvs[qp][at..at + n]
                .iter()
                .map(|&idx| Mini {
                    wqe_counter: idx as u16,
                    opcode: 0,
                    byte_cnt: match s.range(0, 3) {
                        0 => 0,
                        _ if ud => 40 + s.range(0, 4096) as u32,
                        _ => s.next_u64() as u32,
                    },
                    hash: s.next_u64() as u32,
                })
                .collect()
        };
        let op = if req {
            CqeOpcode::REQ
        } else {
            match (q.sq.qp_type, s.range(0, 3)) {
                (ibv::QPT_UD, k) if k % 2 == 0 => CqeOpcode::RESP_SEND,
                (ibv::QPT_UD, _) => CqeOpcode::RESP_SEND_IMM,
                (_, 0) => CqeOpcode::RESP_SEND,
                (_, 1) => CqeOpcode::RESP_SEND_IMM,
                (ibv::QPT_RC, 3) => CqeOpcode::RESP_SEND_INV,
                _ => CqeOpcode::RESP_WR_IMM,
            }
        };
        let first = first(s, q, op, &minis[0]);
        Some(Session {
            first,
            minis,
            req,
            qp,
        })
    }
}

/// Situations a run counts ([`Stats::seen`]); at 1,000 cases or more the
/// test requires each.
pub const SITUATIONS: [&str; 13] = [
    "a requester session",
    "a responder session",
    "a UD responder session",
    "a RESP_SEND_INV session",
    "a plain CQE between sessions",
    "a session of cqe_cnt (the most the ring allows)",
    "a session of more than 8 (several mini-CQE arrays)",
    "a session across the ring's end",
    "a title in the ring's last slot",
    "a session taken over several polls",
    "a poll taking several sessions",
    "a QP's own CQ",
    "a CQ several QPs share",
];

/// What a run compared.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    /// Completions compared (each in both worlds).
    pub cqes: u64,
    /// Sessions (of 2 or more) written.
    pub sessions: u64,
    pub polls: u64,
    /// How many times each of [`SITUATIONS`] came up.
    pub seen: [u64; SITUATIONS.len()],
}

/// A session written: where its title went in world A's ring, its
/// count, and its first completion's position in the whole run.
struct Written {
    title: u32,
    n: u32,
    first: usize,
    checked: bool,
}

/// A case for sessions: a CQ of 4 to 2^10 64-byte slots and 1 to 4 QPs,
/// each with an SQ and an RQ large enough for a session the size of the
/// CQ (`cqe.rs`'s generators for the rest).
fn session_case(s: &mut impl Source) -> Case {
    let log = match s.range(0, 9) {
        0..=6 => s.range(2, 5),
        _ => s.range(6, 10),
    };
    let cqe_cnt = 1u32 << log;
    let arena: Vec<u8> = (0..gen::ARENA).map(|_| s.next_u64() as u8).collect();
    let base = arena.as_ptr() as u64;
    let mut qps: Vec<QpCase> = Vec::new();
    for _ in 0..s.range(1, 4) {
        let (qpn, uidx) = fresh_ids(s, &qps);
        let qp_type = [ibv::QPT_RC, ibv::QPT_UC, ibv::QPT_UD][s.range(0, 2) as usize];
        let mut sq = sq_config(s, qp_type, qpn);
        sq.wqe_cnt = (2 * cqe_cnt * sq.max_wqebbs).next_power_of_two();
        sq.max_post = sq.wqe_cnt / sq.max_wqebbs;
        let all_signaled = s.chance(60);
        let sends = (0..s.range(0, 2 * cqe_cnt as u64))
            .map(|_| {
                let mut w = gen::wr(s, &sq, base);
                w.signaled |= all_signaled;
                w
            })
            .collect();
        let wqe_cnt = cqe_cnt << s.range(0, 1);
        let stride = 16u32 << s.range(0, 3);
        let head = start_index(s);
        let k = s.range(0, wqe_cnt as u64);
        let recvs = recv_wrs(s, k, stride / 16);
        qps.push(QpCase {
            sq,
            uidx,
            rq: Some(RqCase {
                wqe_cnt,
                stride,
                head,
                recvs,
            }),
            sends,
        });
    }
    // The first title often in the ring's last slots.
    let mut start_ci = start_index(s);
    if s.chance(40) {
        start_ci = (start_ci | (cqe_cnt - 1)).wrapping_sub(s.range(0, 2) as u32);
    }
    Case {
        cqe_cnt,
        cqe_size: 64,
        start_ci,
        stale: cqe_cnt,
        ignore_overrun: s.chance(50),
        qps,
        srq: None,
        arena,
    }
}

fn owner(i: u32, cnt: u32) -> u8 {
    mlx5_dv::cqe::owner_bit(i, cnt)
}

fn put(ring: &mut [u8], i: u32, cnt: u32, cqe: &[u8; 64]) {
    let o = (i & (cnt - 1)) as usize * 64;
    ring[o..o + 64].copy_from_slice(cqe);
}

fn slot(ring: &[u8], i: u32, cnt: u32) -> [u8; 64] {
    let o = (i & (cnt - 1)) as usize * 64;
    ring[o..o + 64].try_into().expect("a slot")
}

/// Slots `title .. title+N` of `ring` against the full CQEs of `s`;
/// `Err` names the first difference.
fn expanded_alike(
    ring: &[u8],
    cnt: u32,
    title: u32,
    s: &Session,
    what: &str,
) -> Result<(), String> {
    for k in 0..s.minis.len() {
        let at = title.wrapping_add(k as u32);
        let (got, want) = (slot(ring, at, cnt), full_cqe(s, k, owner(at, cnt)));
        if got != want {
            let bytes: Vec<usize> = (0..64).filter(|&b| got[b] != want[b]).collect();
            return Err(format!(
                "{what}: completion {k} of a session of {} (title at {title:#x}, ring of {cnt}) \
                 differs from its full CQE in bytes {bytes:?}\nexpanded: {got:02x?}\nfull:     {want:02x?}\n{s:?}",
                s.minis.len()
            ));
        }
    }
    Ok(())
}

/// One generated case of sessions from `s` (see the module's doc). `Err`
/// describes the first difference.
pub fn run_sessions(s: &mut impl Source) -> Result<Stats, String> {
    let case = session_case(s);
    let (mut a, posted) = World::new(s, &case)?;
    let (mut b, posted_b) = World::new(s, &case)?;
    if format!("{posted:?}") != format!("{posted_b:?}") {
        return Err("the two worlds posted differently".into());
    }
    let (cnt, start) = (case.cqe_cnt, case.start_ci);
    let mut st = Stats::default();
    st.seen[11] += (case.qps.len() == 1) as u64;
    st.seen[12] += (case.qps.len() > 1) as u64;
    let mut pending = Pending::new(&posted);
    let mut next = pending.session(s, &case, cnt);
    let (mut sessions, mut fulls) = (Vec::<(Session, Option<Written>)>::new(), Vec::new());
    // Producer indices: world A's, the others' (alike: a session takes a
    // slot a completion, its title's the first's).
    let (mut pi_a, mut pi) = (start, start);
    let mut polled = 0usize;
    let (mut oa, mut ob) = (Vec::with_capacity(64), Vec::with_capacity(64));
    let (mut ta, mut tb) = ([po_wc::default(); 64], [po_wc::default(); 64]);
    loop {
        let unpolled = pi.wrapping_sub(b.cq.ci());
        let room = cnt - pi_a.wrapping_sub(a.cq.ci());
        let fits = next.as_ref().map(|x| {
            let n = x.minis.len() as u32;
            n <= room
        });
        if fits == Some(true) && (unpolled == 0 || s.chance(40)) {
            let x = next.take().expect("a session");
            let n = x.minis.len() as u32;
            for k in 0..x.minis.len() {
                let i = pi.wrapping_add(k as u32);
                let f = full_cqe(&x, k, owner(i, cnt));
                put(a.rings[1].bytes_mut(), i, cnt, &f);
                for r in b.rings.iter_mut() {
                    put(r.bytes_mut(), i, cnt, &f);
                }
                fulls.push(f);
            }
            let written = if n == 1 {
                put(
                    a.rings[0].bytes_mut(),
                    pi_a,
                    cnt,
                    &full_cqe(&x, 0, owner(pi_a, cnt)),
                );
                st.seen[4] += !sessions.is_empty() as u64;
                None
            } else {
                let mut first = x.first;
                first[63] |= owner(pi_a, cnt);
                let ring = a.rings[0].bytes_mut();
                mini_cqe::write_session(ring, cnt, pi_a & (cnt - 1), &first, &x.mini_cqes())
                    .map_err(|e| format!("write_session: {e}"))?;
                // Our expansion, on a copy of the ring.
                let mut copy = ring.to_vec();
                let got = mini_cqe::expand_session(&mut copy, cnt, pi_a)
                    .map_err(|e| format!("expand_session: {e}"))?;
                if got != n {
                    return Err(format!("expand_session gave {got} completions, not {n}"));
                }
                expanded_alike(&copy, cnt, pi_a, &x, "expand_session")?;
                st.sessions += 1;
                let t = pi_a & (cnt - 1);
                let seen = [
                    x.req,
                    !x.req,
                    !x.req && case.qps[x.qp].sq.qp_type == ibv::QPT_UD,
                    x.first[63] >> 4 == CqeOpcode::RESP_SEND_INV.0,
                    false,
                    n == cnt,
                    n > mini_cqe::MINIS_PER_SLOT,
                    t + n >= cnt,
                    t == cnt - 1,
                ];
                for (k, y) in seen.into_iter().enumerate() {
                    st.seen[k] += y as u64;
                }
                Some(Written {
                    title: pi_a,
                    n,
                    first: fulls.len() - n as usize,
                    checked: false,
                })
            };
            pi_a = pi_a.wrapping_add(n);
            pi = pi.wrapping_add(n);
            sessions.push((x, written));
            next = pending.session(s, &case, cnt);
            continue;
        }
        if unpolled == 0 {
            if next.is_none() {
                break;
            }
            return Err(format!(
                "a session of {} does not fit an empty ring of {cnt}",
                next.map_or(0, |x| x.minis.len())
            ));
        }
        let ne = batch(s);
        oa.clear();
        ob.clear();
        let ra = a.poll_ours::<64>(ne, &mut oa);
        // SAFETY: the CQs are live; `ta` and `tb` hold 64 entries.
        let (na, nb) = unsafe {
            (
                po_poll_cq(a.pcq, ne as i32, ta.as_mut_ptr()),
                po_poll_cq(b.pcq, ne as i32, tb.as_mut_ptr()),
            )
        };
        let rb = b.poll_ours::<64>(ne, &mut ob);
        st.polls += 1;
        let at = |k: usize| format!("completion {} of the run\n{}", polled + k, case.summary());
        ra.map_err(|e| format!("world A (compressed): {e}\n{}", at(oa.len())))?;
        rb.map_err(|e| format!("world B (full): {e}\n{}", at(ob.len())))?;
        let counts = [oa.len() as i32, na, ob.len() as i32, nb];
        if counts.iter().any(|&c| c != counts[0]) {
            return Err(format!(
                "a poll of {ne}: decompressed (ours) {}, libmlx5 {na}; full (ours) {}, libmlx5 {nb}\n{}",
                oa.len(),
                ob.len(),
                at(0)
            ));
        }
        if oa.is_empty() {
            return Err(format!(
                "{unpolled} CQEs written, and no poll takes them\n{}",
                at(0)
            ));
        }
        for k in 0..oa.len() {
            let cqe = Cqe::decode(&fulls[polled + k]);
            // (A RESP_SEND_INV's `IBV_WC_WITH_INV` and rkey: `differences`.)
            let (t_a, t_b) = (ta[k], tb[k]);
            let mut d: Vec<String> = differences(&cqe, &oa[k], &t_a)
                .into_iter()
                .map(|x| format!("decompressed, ours against libmlx5: {x}"))
                .collect();
            d.extend(
                differences(&cqe, &ob[k], &t_b)
                    .into_iter()
                    .map(|x| format!("full, ours against libmlx5: {x}")),
            );
            if oa[k] != ob[k] {
                d.push(format!("ours: decompressed {:?}, full {:?}", oa[k], ob[k]));
            }
            if ta[k] != tb[k] {
                d.push(format!("libmlx5: world A {:?}, world B {:?}", ta[k], tb[k]));
            }
            if !d.is_empty() {
                let cqe = &fulls[polled + k];
                return Err(format!("{}\nfull CQE {cqe:02x?}\n{}", d.join("\n"), at(k)));
            }
        }
        polled += oa.len();
        st.cqes += oa.len() as u64;
        check_indices(&a, &b, start, polled, &mut sessions, &mut st)?;
        let ring = a.rings[0].bytes();
        for (x, w) in sessions.iter_mut() {
            if let Some(w) = w.as_mut().filter(|w| !w.checked && w.first < polled) {
                expanded_alike(ring, cnt, w.title, x, "our poll's expansion in place")?;
                w.checked = true;
            }
        }
    }
    Ok(st)
}

/// After a poll that took `polled` completions from the start: world B's
/// indices as `cqe.rs` checks them; world A's provider consumer index
/// that of B's, ours the same (a session takes a slot a completion), its
/// doorbell record ours (or, ignoring overrun, as it started),
/// its SQs' retired WRs the provider's and world B's.
fn check_indices(
    a: &World,
    b: &World,
    start: u32,
    polled: usize,
    sessions: &mut [(Session, Option<Written>)],
    st: &mut Stats,
) -> Result<(), String> {
    b.indices(start)
        .map_err(|e| format!("world B (full): {e}"))?;
    let begun = sessions
        .iter()
        .filter_map(|(_, w)| w.as_ref())
        .filter(|w| w.first < polled)
        .count() as u32;
    // Sessions begun but not finished, or finished in this poll together
    // with another.
    let partial = sessions
        .iter()
        .filter_map(|(_, w)| w.as_ref())
        .any(|w| w.first < polled && polled < w.first + w.n as usize);
    st.seen[9] += partial as u64;
    let fresh = sessions
        .iter()
        .filter_map(|(_, w)| w.as_ref())
        .filter(|w| !w.checked && w.first < polled)
        .count();
    st.seen[10] += (fresh > 1) as u64;
    let want_t = start.wrapping_add(polled as u32);
    // SAFETY: the CQ is live.
    let theirs = unsafe { po_cq_cons_index(a.pcq) };
    let ours = a.cq.ci();
    let want = want_t;
    if theirs != want_t || ours != want {
        return Err(format!(
            "world A after {polled} completions, {begun} sessions begun: consumer index ours {ours:#x} \
             (expected {want:#x}), libmlx5's {theirs:#x} (expected {want_t:#x})"
        ));
    }
    let rec = <[u8; 4]>::try_from(&a.dbrecs[0].bytes()[..4]).unwrap();
    let want_rec = if a.cq.overrun_ignored() { start } else { ours };
    if rec != (want_rec & 0xff_ffff).to_be_bytes() {
        return Err(format!(
            "world A: our CQ doorbell record {rec:02x?}, expected {want_rec:#x}"
        ));
    }
    for (k, (q, qb)) in a.qps.iter().zip(&b.qps).enumerate() {
        let mut t = po_sq_state::default();
        // SAFETY: the QP is live.
        unsafe { po_qp_state(a.pqps[k], &mut t) };
        let r = [q.sq.retired_count(), t.tail, qb.sq.retired_count()];
        if r[0] != r[1] || r[0] != r[2] {
            return Err(format!(
                "QP {:#x}: WRs retired: world A ours {}, libmlx5 {}; world B ours {}",
                q.qpn, r[0], r[1], r[2]
            ));
        }
    }
    Ok(())
}
