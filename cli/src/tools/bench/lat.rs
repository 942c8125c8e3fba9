//! The latency tests with both sides in this process (`run_lat`).

use super::*;
use rdma_direct::{DcDest, WrOp, WriteWr};

/// Runs a latency test with both sides in this process (two connected QPs on
/// one device). Atomics always move 8 bytes (perftest has no `-s` for them).
pub fn run_lat(test: LatTest, cfg: &LatConfig) -> Result<(RunInfo, LatReport)> {
    let size_asked = if test == LatTest::Atomic { 8 } else { cfg.size };
    let rounds = if cfg.duration.is_some() {
        DURATION_SAMPLES
    } else {
        cfg.iters
    };
    let mut stamps: Vec<u64> = checked_run(size_asked, rounds)?;
    let ctx = Context::open_with(&cfg.device, cfg.backend)?;
    let _off_device_cpu = OffDeviceCpu::new(cfg.device == rdma_direct::SIM_DEVICE);
    let pd = ctx.alloc_pd()?;
    let size = size_asked as usize;
    // Each side: [0, size) is what it sends (or where reads and old values
    // land), [size, 2 size) what the peer writes, reads or adds to.
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    // (40 more on UD: a receive begins with the GRH slot.)
    let mr_a = pd.alloc_mr(2 * size + 40, access)?;
    let mr_b = pd.alloc_mr(2 * size + 40, access)?;
    let inline = matches!(test, LatTest::Write | LatTest::Send) && size_asked <= cfg.inline_size;
    let dc = cfg.qp_type.is_dc();
    let qcfg = QpConfig {
        qp_type: cfg.qp_type,
        max_send_wr: 16,
        max_inline: if inline { cfg.inline_size } else { 0 },
        max_send_sge: cfg.atomic.send_sges(),
        port: cfg.port,
        gid_index: cfg.gid_index,
        cqe_compression: cfg.cqe_comp,
        inline_recv: cfg.inline_recv,
        ..QpConfig::default()
    };
    // On DC, B posts back from a DCI of its own to a DCT of A's in the
    // ping-pong tests (perftest makes both on each side for latency).
    let both_ways = matches!(test, LatTest::Write | LatTest::Send);
    let (mut pair, dests) = transport::Pair::new(&pd, &qcfg, cfg.use_srq, both_ways)?;
    let p = &mut pair;
    if cfg.qp_type == rdma_direct::QpType::Ud && size_asked > p.a.ud_mtu() {
        return Err(Error::Invalid(format!(
            "-s {size_asked}: a UD message is at most the port's active MTU, {} bytes",
            p.a.ud_mtu()
        )));
    }
    let side = |qp: &Qp, mr: &Mr| SideInfo {
        qpn: qp.qp_num(),
        path: qp.path(),
        rkey: mr.rkey().0,
        vaddr: mr.addr(),
    };
    let mut info = RunInfo {
        qps: 1,
        rdma_cm: false,
        completion: cfg_completion(cfg),
        role: None,
        device: ctx.name().into(),
        data_path: p.a.data_path().as_str(),
        inline: qcfg.max_inline,
        // One WR in flight at a time, as perftest's latency tests print.
        tx_depth: 1,
        sides: [side(&p.a, &mr_a), side(&p.b, &mr_b)],
        qp_type: cfg.qp_type,
        use_srq: cfg.use_srq,
        cqe_comp: cfg.cqe_comp,
        cqe_bytes: None,
        inline_recv: cfg.inline_recv,
    };
    let remote = |mr: &Mr| RemoteAddr {
        addr: mr.addr() + size as u64,
        rkey: mr.rkey(),
    };
    let (to_b, to_a) = (remote(&mr_b), remote(&mr_a));
    let sge_a = [Sge::new(&mr_a, 0, size_asked)?];
    let sge_b = [Sge::new(&mr_b, 0, size_asked)?];
    let mut m = CpuMeter::new(cfg);
    let mut deadline = deadline_after(cfg.duration);

    match test {
        LatTest::Write => {
            let last = size - 1;
            let mut wr_a = SendWr::rdma_write(0, &sge_a, to_b).signaled();
            let mut wr_b = SendWr::rdma_write(0, &sge_b, to_a).signaled();
            wr_a.inline = inline;
            wr_b.inline = inline;
            for i in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                let seq = (i as u8).wrapping_add(1);
                stamps.push(ticks());
                mr_a.store_u8(last, seq);
                wr_a.wr_id = i as u64;
                m.post(1, || post_one_write(&mut p.a, &wr_a, dests.dc(true)))?;
                spin_until(
                    || format!("iteration {i}: A's write never reached B"),
                    || Ok(mr_b.load_u8(size + last) == seq),
                )?;
                mr_b.store_u8(last, seq);
                wr_b.wr_id = i as u64;
                m.post(1, || post_one_write(p.b_tx(), &wr_b, dests.dc(false)))?;
                spin_until(
                    || format!("iteration {i}: B's write never reached A"),
                    || Ok(mr_a.load_u8(size + last) == seq),
                )?;
                wait_completion(p.b_tx(), "B", &mut m)?;
                wait_completion(&mut p.a, "A", &mut m)?;
            }
        }
        LatTest::Send => {
            // perftest's send latency: each side keeps a receive posted into
            // [size, 2 size) of its buffer; A sends, B waits for the receive,
            // reposts and sends back; A waits for its receive and reposts.
            let rlen = transport::recv_len(cfg.qp_type, size_asked);
            let rbuf_a = [Sge::new(&mr_a, size, rlen)?];
            let rbuf_b = [Sge::new(&mr_b, size, rlen)?];
            let ra = [RecvWr::new(0, &rbuf_a)];
            let rb = [RecvWr::new(0, &rbuf_b)];
            m.post(1, || p.post_recv_a(&ra))?;
            m.post(1, || p.post_recv_b(&rb))?;
            let mut wr_a = dests.send_wr(true, &sge_a).signaled();
            let mut wr_b = dests.send_wr(false, &sge_b).signaled();
            wr_a.inline = inline;
            wr_b.inline = inline;
            for _ in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                stamps.push(ticks());
                m.post(1, || dests.post(&mut p.a, true, &[wr_a]))?;
                wait_recv(&mut p.b, "B", &mut m)?;
                m.post(1, || p.post_recv_b(&rb))?;
                m.post(1, || dests.post(p.b_tx(), false, &[wr_b]))?;
                wait_recv(p.a_rx(), "A", &mut m)?;
                m.post(1, || p.post_recv_a(&ra))?;
                if dc {
                    // A DCI's send completions come on its own CQ, not
                    // with the receives (one CQ per QP on RC, UC, UD).
                    wait_completion(p.b_tx(), "B", &mut m)?;
                    wait_completion(&mut p.a, "A", &mut m)?;
                }
            }
        }
        LatTest::Read | LatTest::Atomic => {
            // perftest's read and atomic latency: one side posts, waits for its
            // completion, posts again; the peer is passive.
            let mut wr = if test == LatTest::Read {
                SendWr::rdma_read(0, &sge_a, to_b).signaled()
            } else {
                cfg.atomic.wr(0, &sge_a, to_b).signaled()
            };
            for i in 0..rounds {
                if past(&mut deadline) {
                    break;
                }
                stamps.push(ticks());
                wr.wr_id = i as u64;
                m.post(1, || dests.post(&mut p.a, true, &[wr]))?;
                wait_completion(&mut p.a, "A", &mut m)?;
            }
        }
    }
    info.cqe_bytes = super::sim_cqe_bytes(p.qps_mut());
    drop(pair);
    let report = lat_report(size_asked, &stamps, test.rtt_factor(), &m)?;
    Ok((info, report))
}

/// Posts the RDMA WRITE `w`: to the DCT `dc` names through `Qp::post_dc`
/// on DC; through `Qp::post_write` when it is one SGE and not inline (the
/// same WQE, nothing decoded), else `Qp::post_send`.
fn post_one_write(qp: &mut Qp, w: &SendWr<'_>, dc: Option<DcDest<'_>>) -> Result<()> {
    if let Some(d) = dc {
        return qp.post_dc(&d, std::slice::from_ref(w));
    }
    match (w.op, w.sges, w.inline) {
        (WrOp::RdmaWrite { remote }, [sge], false) => qp.post_write(&WriteWr {
            wr_id: w.wr_id,
            sge: *sge,
            remote,
            flags: w.flags,
        }),
        _ => qp.post_send(std::slice::from_ref(w)),
    }
}
