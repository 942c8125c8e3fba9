//! CQEs against libmlx5's `mlx5_poll_cq_v1`: the CQEs the sim writes
//! (its own writer, `sim::Cq::hook_push_cqe`) for WRs posted on both
//! sides, polled by our direct path and by the provider from identical
//! rings, every completion field both have compared, and the consumer
//! index, the CQ doorbell record and the SQ's retired count after each
//! poll (`mlx5_provider_oracle::cqe`). A run counts the kinds of CQE it
//! compared and fails if a kind never came up.

use mlx5_provider_oracle::oracle_or_skip;

#[cfg(provider_oracle)]
mod both {
    use mlx5_dv::cqe::Cqe;
    use mlx5_dv::prm::{CqeOpcode, Syndrome, WqeOpcode};
    use mlx5_provider_oracle::cqe::{
        run, Event, Planned, Tamper, SIM_REQ_SYNDROMES, SIM_RESP_SYNDROMES,
    };
    use mlx5_provider_oracle::gen::{Bytes, Rng, Source};
    use mlx5_provider_oracle::wr::ibv;
    use proptest::prelude::*;

    const REQ_OPS: [(WqeOpcode, &str); 8] = [
        (WqeOpcode::SEND, "SEND"),
        (WqeOpcode::SEND_IMM, "SEND_IMM"),
        (WqeOpcode::SEND_INVAL, "SEND_INVAL"),
        (WqeOpcode::RDMA_WRITE, "RDMA_WRITE"),
        (WqeOpcode::RDMA_WRITE_IMM, "RDMA_WRITE_IMM"),
        (WqeOpcode::RDMA_READ, "RDMA_READ"),
        (WqeOpcode::ATOMIC_CS, "ATOMIC_CS"),
        (WqeOpcode::ATOMIC_FA, "ATOMIC_FA"),
    ];
    const TYPES: [(u32, &str); 3] = [
        (ibv::QPT_RC, "RC"),
        (ibv::QPT_UC, "UC"),
        (ibv::QPT_UD, "UD"),
    ];
    const SITUATIONS: [&str; 14] = [
        "a vendor syndrome",
        "a UD receive with the GRH flag",
        "a UD receive without it",
        "a UD receive from an SL other than 0",
        "a solicited CQE",
        "64-byte CQEs",
        "128-byte CQEs",
        "a QP's own CQ",
        "a CQ several QPs share",
        "our CQ ignoring overrun (no record per poll)",
        "our CQ writing the record per poll",
        "16 or more completions in one poll",
        "a poll across consumer index 2^24",
        "a poll across consumer index 2^32",
    ];
    /// The receive CQE opcodes, in `CqeOpcode` order from 1.
    const RECV_OPS: [&str; 4] = ["RESP_WR_IMM", "RESP_SEND", "RESP_SEND_IMM", "RESP_SEND_INV"];
    /// Requester success by WQE opcode (8), receives by opcode, RQ or SRQ
    /// and transport (24), REQ_ERR by the sim's syndromes, flush, other
    /// (10), RESP_ERR likewise (5), then the situations.
    const RECV: usize = REQ_OPS.len();
    const REQ_ERR: usize = RECV + RECV_OPS.len() * 6;
    const RESP_ERR: usize = REQ_ERR + SIM_REQ_SYNDROMES.len() + 2;
    const SITUATION: usize = RESP_ERR + SIM_RESP_SYNDROMES.len() + 2;
    const KINDS: usize = SITUATION + SITUATIONS.len();

    /// How many of each kind a run compared.
    pub struct Seen(pub [u64; KINDS]);

    impl Seen {
        pub fn new() -> Self {
            Seen([0; KINDS])
        }

        fn names() -> Vec<String> {
            let mut v: Vec<String> = REQ_OPS.iter().map(|(_, o)| format!("REQ of {o}")).collect();
            for op in RECV_OPS {
                for at in ["an RQ", "the SRQ"] {
                    v.extend(TYPES.iter().map(|(_, t)| format!("{op} on {at}, {t}")));
                }
            }
            let errs: [(&str, &[Syndrome]); 2] = [
                ("REQ_ERR", &SIM_REQ_SYNDROMES),
                ("RESP_ERR", &SIM_RESP_SYNDROMES),
            ];
            for (what, sim) in errs {
                v.extend(
                    sim.iter()
                        .map(|x| format!("{what} with syndrome {:#04x}", x.0)),
                );
                v.push(format!("{what} WR_FLUSH_ERR"));
                v.push(format!("{what} with a syndrome the sim never writes"));
            }
            v.extend(SITUATIONS.iter().map(|s| s.to_string()));
            v
        }

        /// The kinds never met (but a UD RESP_WR_IMM or RESP_SEND_INV,
        /// which are none).
        pub fn missing(&self) -> Vec<String> {
            let ud_none = |name: &str| {
                name.ends_with("UD")
                    && (name.starts_with("RESP_WR_IMM") || name.starts_with("RESP_SEND_INV"))
            };
            Self::names()
                .into_iter()
                .zip(self.0)
                .filter(|(name, n)| *n == 0 && !ud_none(name))
                .map(|(name, _)| name)
                .collect()
        }

        fn situation(&mut self, k: usize, yes: bool) {
            self.0[SITUATION + k] += yes as u64;
        }

        pub fn event(&mut self, e: Event<'_>) {
            match e {
                Event::Case(c) => {
                    self.situation(5, c.cqe_size == 64);
                    self.situation(6, c.cqe_size == 128);
                    self.situation(7, c.qps.len() == 1);
                    self.situation(8, c.qps.len() > 1);
                    self.situation(9, c.ignore_overrun);
                    self.situation(10, !c.ignore_overrun);
                }
                Event::Poll { n, from, to } => {
                    self.situation(11, n >= 16);
                    self.situation(12, from & 0xff_ffff > to & 0xff_ffff);
                    self.situation(13, from > to);
                }
                Event::Cqe(p, qp_type) => self.cqe(p, qp_type),
            }
        }

        fn cqe(&mut self, p: &Planned, qp_type: u32) {
            let c = &p.cqe;
            let errs = |sim: &[Syndrome], base: usize| {
                base + match sim.iter().position(|x| *x == c.syndrome) {
                    Some(i) => i,
                    None if c.syndrome == Syndrome::WR_FLUSH_ERR => sim.len(),
                    None => sim.len() + 1,
                }
            };
            let t = TYPES.iter().position(|(x, _)| *x == qp_type).unwrap_or(0);
            let k = match c.opcode {
                CqeOpcode::REQ => REQ_OPS.iter().position(|(o, _)| *o == c.wqe_opcode),
                CqeOpcode::REQ_ERR => Some(errs(&SIM_REQ_SYNDROMES, REQ_ERR)),
                CqeOpcode::RESP_ERR => Some(errs(&SIM_RESP_SYNDROMES, RESP_ERR)),
                op => Some(RECV + (op.0 as usize - 1) * 6 + p.srq as usize * 3 + t),
            };
            if let Some(k) = k {
                self.0[k] += 1;
            }
            self.situation(0, c.opcode.is_error() && c.vendor_syndrome != 0);
            let received = !c.opcode.is_error() && c.opcode != CqeOpcode::REQ;
            if qp_type == ibv::QPT_UD && received {
                self.situation(1, c.grh());
                self.situation(2, !c.grh());
                self.situation(3, (c.flags_rqpn >> 24) & 0xf != 0);
            }
            self.situation(4, c.solicited);
        }
    }

    #[test]
    fn the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1() {
        if !super::oracle_or_skip("the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1") {
            return;
        }
        mlx5_provider_oracle::ffi::check_abi().unwrap();
        let n = mlx5_provider_oracle::cases(2_000);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: n,
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let seen = std::cell::RefCell::new(Seen::new());
        let totals = std::cell::Cell::new((0u64, 0u64));
        let r = runner.run(&any::<u64>(), |seed| {
            let mut on = |e: Event<'_>| seen.borrow_mut().event(e);
            let st = run(&mut Rng(seed), None, &mut on).map_err(TestCaseError::fail)?;
            let (c, p) = totals.get();
            totals.set((c + st.cqes, p + st.polls));
            Ok(())
        });
        let (cqes, polls) = totals.get();
        mlx5_provider_oracle::say(
            "the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1",
            format_args!("{cqes} CQEs ({polls} polls) compared with mlx5_poll_cq_v1"),
        );
        if let Err(e) = r {
            panic!("{e}");
        }
        let missing = seen.borrow().missing();
        if n >= 1_000 {
            assert!(missing.is_empty(), "never compared: {missing:?}");
        } else if !missing.is_empty() {
            mlx5_provider_oracle::say(
                "the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1",
                format_args!("{n} cases met no {missing:?}"),
            );
        }
    }

    /// A fuzzer's input drives the same run (`gen::Bytes`: zeros once it
    /// runs out): short and empty inputs end, and agree.
    #[test]
    fn any_bytes_drive_a_run_that_ends() {
        if !super::oracle_or_skip("any_bytes_drive_a_run_that_ends") {
            return;
        }
        let mut r = Rng(27);
        for len in (0..200).chain([1000, 4000]) {
            let bytes: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
            if let Err(e) = run(&mut Bytes(&bytes), None, &mut |_| {}) {
                panic!("{len} bytes: {e}");
            }
        }
    }

    /// Runs seeds until `tamper` finds its CQE; returns the run's error.
    fn tampered(tamper: Tamper) -> String {
        for seed in 0..10_000u64 {
            let mut found = false;
            let r = run(&mut Rng(seed), Some(tamper), &mut |_| {});
            if let Ok(st) = &r {
                found = st.tampered;
            }
            match r {
                Err(e) => return e,
                Ok(_) if found => panic!("seed {seed}: the altered CQE went unnoticed"),
                Ok(_) => {}
            }
        }
        panic!("no case had a CQE to alter");
    }

    fn recv_ok(c: &Cqe) -> bool {
        matches!(c.opcode, CqeOpcode::RESP_SEND | CqeOpcode::RESP_SEND_IMM)
    }

    /// The comparison can fail: one CQE altered in one ring only is a
    /// difference, named by the field it changes.
    #[test]
    fn a_cqe_altered_on_one_side_is_a_difference() {
        if !super::oracle_or_skip("a_cqe_altered_on_one_side_is_a_difference") {
            return;
        }
        let cases: [(&str, Tamper); 4] = [
            // A receive's byte count (bytes 44..48), in the provider's ring.
            (
                "byte_len",
                Tamper {
                    pick: recv_ok,
                    byte: 47,
                    xor: 1,
                    theirs: true,
                },
            ),
            // An error CQE's syndrome (byte 55), in ours: 0x05 -> 0x04.
            (
                "status",
                Tamper {
                    pick: |c| c.syndrome == Syndrome::WR_FLUSH_ERR,
                    byte: 55,
                    xor: 1,
                    theirs: false,
                },
            ),
            // A received immediate (bytes 36..40), in ours.
            (
                "imm",
                Tamper {
                    pick: |c| c.opcode == CqeOpcode::RESP_SEND_IMM,
                    byte: 36,
                    xor: 0x80,
                    theirs: false,
                },
            ),
            // A UD receive's source QPN (bytes 24..28), in the provider's.
            (
                "src_qp",
                Tamper {
                    pick: |c| recv_ok(c) && c.flags_rqpn != 0,
                    byte: 27,
                    xor: 1,
                    theirs: true,
                },
            ),
        ];
        for (field, t) in cases {
            let e = tampered(t);
            assert!(e.starts_with(&format!("{field}: ")), "{field}: {e}");
        }
    }
}

#[cfg(not(provider_oracle))]
#[test]
fn the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1() {
    assert!(!oracle_or_skip(
        "the_sims_cqes_read_alike_by_our_poll_and_mlx5_poll_cq_v1"
    ));
}

#[cfg(not(provider_oracle))]
#[test]
fn a_cqe_altered_on_one_side_is_a_difference() {
    assert!(!oracle_or_skip("a_cqe_altered_on_one_side_is_a_difference"));
}

#[cfg(not(provider_oracle))]
#[test]
fn any_bytes_drive_a_run_that_ends() {
    assert!(!oracle_or_skip("any_bytes_drive_a_run_that_ends"));
}
