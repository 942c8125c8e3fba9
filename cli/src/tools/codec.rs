//! `encode-wqe` and `decode-cqe`: see exactly what goes on the ring.
//! Part of the `rdma-direct` binary (feature `cli`).

use clap::{Args, ValueEnum};
use mlx5_dv::cqe::{sw_owned, Cqe};
use mlx5_dv::doorbell::sq_dbrec;
use mlx5_dv::prm::{CqeOpcode, CtrlFlags, WqeOpcode, DS, MAX_DS, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{write_send_wqe, AtomicSeg, DataSeg, Payload, RemoteSeg, SendWqe, SqGeometry};
use rdma_direct::WcStatus;
use serde_json::{json, Value};

/// A number in decimal or `0x` hex (digits only: no sign, spaces or `_`).
pub fn num<T: TryFrom<u128>>(s: &str) -> Result<T, String> {
    let (digits, radix) = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (s, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("{s:?} is not a decimal or 0x-hex number"));
    }
    let v = u128::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is out of range"))?;
    T::try_from(v).map_err(|_| format!("{s:?} is out of range"))
}

fn sge(s: &str) -> Result<DataSeg, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let [a, l, k] = parts[..] else {
        return Err(format!("{s:?}: an SGE is ADDR:LEN:LKEY"));
    };
    Ok(DataSeg {
        addr: num(a)?,
        len: num(l)?,
        lkey: num(k)?,
    })
}

fn cqe_size(s: &str) -> Result<usize, String> {
    match num::<usize>(s)? {
        n @ (64 | 128) => Ok(n),
        n => Err(format!("{n}: a CQE is 64 or 128 bytes")),
    }
}

/// Bytes given as hex on the command line.
#[derive(Clone, Debug)]
pub struct HexBytes(Vec<u8>);

fn hex_bytes(s: &str) -> Result<HexBytes, String> {
    hex_vec(s).map(HexBytes)
}

fn hex_vec(s: &str) -> Result<Vec<u8>, String> {
    let h: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    let h = h.strip_prefix("0x").unwrap_or(&h);
    if let Some(c) = h.chars().find(|c| !c.is_ascii_hexdigit()) {
        return Err(format!("{c:?} is not a hex digit"));
    }
    if !h.len().is_multiple_of(2) {
        return Err(format!(
            "{} hex digits: an odd count (a CQE is 128 digits, 256 with --cqe-size 128)",
            h.len()
        ));
    }
    (0..h.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&h[i..i + 2], 16)
                .map_err(|_| format!("{:?} is not hex", &h[i..i + 2]))
        })
        .collect()
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Op {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cas,
    Faa,
}

impl Op {
    fn opcode(self) -> WqeOpcode {
        match self {
            Op::Send => WqeOpcode::SEND,
            Op::SendImm => WqeOpcode::SEND_IMM,
            Op::Write => WqeOpcode::RDMA_WRITE,
            Op::WriteImm => WqeOpcode::RDMA_WRITE_IMM,
            Op::Read => WqeOpcode::RDMA_READ,
            Op::Cas => WqeOpcode::ATOMIC_CS,
            Op::Faa => WqeOpcode::ATOMIC_FA,
        }
    }
}

/// Encode one send WQE into an SQ ring and print its segments as JSON.
#[derive(Args)]
pub struct EncodeWqe {
    /// Operation.
    #[arg(long)]
    op: Op,
    /// QP number (24 bits).
    #[arg(long, value_parser = num::<u32>)]
    qpn: u32,
    /// Producer index (a 32-bit WQEBB counter).
    #[arg(long, value_parser = num::<u32>)]
    pi: u32,
    /// SQ size in WQEBBs (a power of two).
    #[arg(long = "sq-wqebbs", value_parser = num::<u32>)]
    sq_wqebbs: u32,
    /// Remote address (write, read, atomics).
    #[arg(long, value_parser = num::<u64>)]
    raddr: Option<u64>,
    /// Remote key (write, read, atomics).
    #[arg(long, value_parser = num::<u32>)]
    rkey: Option<u32>,
    /// Scatter/gather entry ADDR:LEN:LKEY (repeatable).
    #[arg(long = "sge", value_parser = sge)]
    sges: Vec<DataSeg>,
    /// Inline payload as hex.
    #[arg(long = "inline-hex", value_parser = hex_bytes)]
    inline_hex: Option<HexBytes>,
    /// Immediate data (send-imm, write-imm).
    #[arg(long, value_parser = num::<u32>)]
    imm: Option<u32>,
    /// Compare value (cas).
    #[arg(long, value_parser = num::<u64>)]
    compare: Option<u64>,
    /// Swap value (cas) or value to add (faa).
    #[arg(long = "swap-add", value_parser = num::<u64>)]
    swap_add: Option<u64>,
    /// Request a CQE (CQ_UPDATE).
    #[arg(long)]
    signaled: bool,
    /// Solicited event.
    #[arg(long)]
    solicited: bool,
    /// Fence (rdma-core's MLX5_WQE_CTRL_FENCE, 4 << 5).
    #[arg(long)]
    fence: bool,
    /// The QP's max_inline_data in bytes [default: what fits in a 63-DS WQE].
    #[arg(long = "max-inline", value_parser = num::<u32>)]
    max_inline: Option<u32>,
    /// WQEBBs free in the SQ [default: the whole ring].
    #[arg(long = "free-wqebbs", value_parser = num::<u32>)]
    free_wqebbs: Option<u32>,
}

/// Runs `encode-wqe`; `Err` is a one-line message for exit code 2.
pub fn encode_wqe(a: &EncodeWqe) -> Result<Value, String> {
    let opcode = a.op.opcode();
    if !a.sq_wqebbs.is_power_of_two() || a.sq_wqebbs > 1 << 16 {
        return Err(format!(
            "--sq-wqebbs {} must be a power of two up to 65536",
            a.sq_wqebbs
        ));
    }
    if a.qpn > 0xff_ffff {
        return Err(format!("--qpn {:#x} does not fit 24 bits", a.qpn));
    }
    let remote = match (a.raddr, a.rkey) {
        (Some(addr), Some(rkey)) => Some(RemoteSeg { addr, rkey }),
        (None, None) => None,
        _ => return Err("--raddr and --rkey go together".into()),
    };
    if remote.is_some() && !opcode.has_raddr() {
        return Err("--raddr and --rkey are for write, write-imm, read, cas and faa".into());
    }
    if remote.is_none() && opcode.has_raddr() {
        let op = a.op.to_possible_value().map(|v| v.get_name().to_string());
        return Err(format!(
            "--op {} needs --raddr and --rkey",
            op.unwrap_or_default()
        ));
    }
    if a.free_wqebbs.is_some_and(|f| f > a.sq_wqebbs) {
        return Err(format!(
            "--free-wqebbs exceeds the {}-WQEBB ring",
            a.sq_wqebbs
        ));
    }
    if a.inline_hex.is_some() && !a.sges.is_empty() {
        return Err("give --inline-hex or --sge, not both".into());
    }
    let atomic = match (a.op, a.swap_add, a.compare) {
        (Op::Cas, Some(swap_add), Some(compare)) => Some(AtomicSeg { swap_add, compare }),
        (Op::Cas, _, _) => return Err("cas needs --swap-add and --compare".into()),
        (Op::Faa, Some(swap_add), None) => Some(AtomicSeg {
            swap_add,
            compare: 0,
        }),
        (Op::Faa, _, _) => return Err("faa needs --swap-add (and no --compare)".into()),
        (_, None, None) => None,
        _ => return Err("--swap-add and --compare are for cas and faa".into()),
    };
    if atomic.is_some() && (a.sges.len() != 1 || a.sges[0].len != 8) {
        return Err("cas and faa take exactly one 8-byte --sge (where the old value lands)".into());
    }
    if a.imm.is_some() && !opcode.has_imm() {
        return Err("--imm is for send-imm and write-imm".into());
    }
    let mut flags = CtrlFlags::empty();
    flags.set(CtrlFlags::CQ_UPDATE, a.signaled);
    flags.set(CtrlFlags::SOLICITED, a.solicited);
    flags.set(CtrlFlags::FENCE, a.fence);
    let raddr_ds = opcode.has_raddr() as u32;
    let fits = ((MAX_DS - 1 - raddr_ds) * DS as u32).saturating_sub(4);
    let geo = SqGeometry {
        wqe_cnt: a.sq_wqebbs,
        qpn: a.qpn,
        max_inline: a.max_inline.unwrap_or(fits),
        max_wqebbs: 16,
    };
    let payload = match &a.inline_hex {
        Some(b) => Payload::Inline(&b.0),
        None => Payload::Sges(&a.sges),
    };
    let wqe = SendWqe {
        datagram: None,
        opcode,
        flags,
        imm: a.imm.unwrap_or(0),
        remote,
        atomic,
        payload,
    };
    let len = a.sq_wqebbs as usize * WQEBB;
    let mut mem = vec![0u8; len];
    let mut ring = RingBuf::from_slice(&mut mem).ok_or("ring too small")?;
    let w = write_send_wqe(
        &mut ring,
        &geo,
        a.pi,
        &wqe,
        a.free_wqebbs.unwrap_or(a.sq_wqebbs),
    )
    .map_err(|e| e.to_string())?;
    let base = (a.pi & (a.sq_wqebbs - 1)) as usize * WQEBB;
    let segments: Vec<Value> = (0..w.ds as usize)
        .map(|i| {
            let off = (base + i * DS) % len;
            json!({ "offset": off, "hex": hex(&mem[off..off + DS]) })
        })
        .collect();
    Ok(json!({
        "ds": w.ds,
        "wqebbs": w.wqebbs,
        "next_pi": w.next_pi,
        "sq_dbrec": hex(&sq_dbrec(w.next_pi).to_be_bytes()),
        "segments": segments,
    }))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decode one CQE and print its fields as JSON.
#[derive(Args)]
pub struct DecodeCqe {
    /// CQE slot size in bytes (in a 128-byte slot the CQE proper is the last 64).
    #[arg(long = "cqe-size", default_value_t = 64, value_parser = cqe_size)]
    cqe_size: usize,
    /// Consumer index, to report ownership (with --cqe-cnt).
    #[arg(long, value_parser = num::<u32>, requires = "cqe_cnt")]
    ci: Option<u32>,
    /// CQ entries (a power of two), to report ownership (with --ci).
    #[arg(long = "cqe-cnt", value_parser = num::<u32>, requires = "ci")]
    cqe_cnt: Option<u32>,
    /// The CQE slot as hex (exactly --cqe-size bytes; spaces and colons ignored).
    #[arg(value_parser = hex_bytes)]
    hex: HexBytes,
}

/// Runs `decode-cqe`; `Err` is a one-line message for exit code 2.
pub fn decode_cqe(a: &DecodeCqe) -> Result<Value, String> {
    let bytes = &a.hex.0;
    if bytes.len() != a.cqe_size {
        return Err(format!(
            "the CQE is {} bytes; {} were given",
            a.cqe_size,
            bytes.len()
        ));
    }
    let c = Cqe::decode_slot(bytes).ok_or("CQE size must be 64 or 128")?;
    // Only completions of work requests have a status; only requester CQEs
    // name a WQE opcode.
    let completion = matches!(c.opcode.0, 0..=4 | 13 | 14);
    let requester = matches!(c.opcode, CqeOpcode::REQ | CqeOpcode::REQ_ERR);
    let status = completion.then(|| WcStatus(c.wc_status()).ident());
    let mut v = json!({
        "opcode": c.opcode.name().map_or_else(|| format!("UNKNOWN_{:#x}", c.opcode.0), str::to_string),
        "status": status,
        "syndrome": c.syndrome.0,
        "vendor_err": c.vendor_syndrome,
        "wqe_opcode": requester.then(|| c.wqe_opcode.name().map_or_else(|| format!("UNKNOWN_{:#04x}", c.wqe_opcode.0), str::to_string)),
        "qpn": c.qpn,
        "wqe_counter": c.wqe_counter,
        "byte_cnt": c.byte_cnt,
        "imm": c.imm,
        "solicited": c.solicited,
        "format": c.format,
        "owner": c.owner as u8,
    });
    if let (Some(ci), Some(cnt)) = (a.ci, a.cqe_cnt) {
        if !cnt.is_power_of_two() {
            return Err(format!("--cqe-cnt {cnt} must be a power of two"));
        }
        v["owned"] = json!(sw_owned(bytes[a.cqe_size - 1], ci, cnt));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct E {
        #[command(flatten)]
        a: EncodeWqe,
    }
    #[derive(Parser)]
    struct D {
        #[command(flatten)]
        a: DecodeCqe,
    }

    fn enc(args: &str) -> Result<Value, String> {
        let e = E::try_parse_from(std::iter::once("x").chain(args.split_whitespace()))
            .map_err(|e| e.to_string())?;
        encode_wqe(&e.a)
    }

    fn dec(args: &str) -> Result<Value, String> {
        let d = D::try_parse_from(std::iter::once("x").chain(args.split_whitespace()))
            .map_err(|e| e.to_string())?;
        decode_cqe(&d.a)
    }

    #[test]
    fn the_wrapping_inline_write_by_hand() {
        let payload: String = (0u8..100).map(|b| format!("{b:02x}")).collect();
        let v = enc(&format!(
            "--op write --qpn 0x1234 --pi 7 --sq-wqebbs 8 --raddr 0xdead0000 --rkey 0xabc --inline-hex {payload} --signaled"
        ))
        .unwrap();
        assert_eq!(
            (
                v["ds"].as_u64(),
                v["wqebbs"].as_u64(),
                v["next_pi"].as_u64()
            ),
            (Some(9), Some(3), Some(10))
        );
        assert_eq!(v["sq_dbrec"], "0000000a");
        let offs: Vec<u64> = v["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["offset"].as_u64().unwrap())
            .collect();
        assert_eq!(offs, [448, 464, 480, 496, 0, 16, 32, 48, 64]);
        assert_eq!(v["segments"][0]["hex"], "00000708001234090000000800000000");
        assert_eq!(
            v["segments"][2]["hex"].as_str().unwrap()[..8].to_string(),
            "80000064"
        );
    }

    #[test]
    fn next_pi_is_a_32_bit_counter() {
        let v = enc("--op send --qpn 1 --pi 0xffff --sq-wqebbs 8 --sge 0x1000:8:1").unwrap();
        assert_eq!(v["next_pi"], 0x1_0000);
        assert_eq!(v["sq_dbrec"], "00000000");
    }

    #[test]
    fn bad_arguments_are_one_line_errors() {
        for bad in [
            "--op write --qpn 1 --pi 0 --sq-wqebbs 8",
            "--op write --qpn 1 --pi 0 --sq-wqebbs 6 --raddr 0 --rkey 1",
            "--op cas --qpn 1 --pi 0 --sq-wqebbs 8 --raddr 8 --rkey 1 --sge 0:8:1 --swap-add 1",
            "--op faa --qpn 1 --pi 0 --sq-wqebbs 8 --raddr 4 --rkey 1 --sge 0:8:1 --swap-add 1",
            "--op send --qpn 1 --pi 0 --sq-wqebbs 8 --inline-hex 0102 --max-inline 1",
            "--op send --qpn 0x1000000 --pi 0 --sq-wqebbs 8",
            "--op send --qpn 1 --pi 0 --sq-wqebbs 8 --sge 1:2",
            "--op send --qpn 1 --pi 0 --sq-wqebbs 8 --imm 5",
            "--op read --qpn 1 --pi 0 --sq-wqebbs 8 --raddr 0 --rkey 1 --sge 0:4:1 --free-wqebbs 0",
        ] {
            let e = enc(bad).expect_err(bad);
            assert!(!e.trim().is_empty(), "{bad}");
        }
    }

    #[test]
    fn decode_req_err_and_ownership() {
        let mut b = [0u8; 64];
        b[54] = 0x88;
        b[55] = 0x13;
        b[56..60].copy_from_slice(&[0x08, 0x00, 0x12, 0x34]);
        b[60..62].copy_from_slice(&[0x00, 0x07]);
        b[63] = 0xd1;
        let v = dec(&format!("--ci 8 --cqe-cnt 8 {}", hex(&b))).unwrap();
        assert_eq!(v["opcode"], "REQ_ERR");
        assert_eq!(v["status"], "REM_ACCESS_ERR");
        assert_eq!(v["syndrome"], 0x13);
        assert_eq!(v["vendor_err"], 0x88);
        assert_eq!(v["wqe_opcode"], "RDMA_WRITE");
        assert_eq!(v["qpn"], 0x1234);
        assert_eq!(v["wqe_counter"], 7);
        assert_eq!(v["owner"], 1);
        assert_eq!(v["owned"], true);
        // In a 128-byte slot the CQE proper is the second half.
        let mut slot = vec![0xaau8; 64];
        slot.extend_from_slice(&b);
        let v = dec(&format!("--cqe-size 128 {}", hex(&slot))).unwrap();
        assert_eq!(v["status"], "REM_ACCESS_ERR");
        assert!(v.get("owned").is_none());
        // Short hex is refused.
        assert!(dec(&hex(&b[..63])).is_err());
        assert!(dec(&format!("--cqe-size 128 {}", hex(&b))).is_err());
    }

    #[test]
    fn resp_send_imm_returns_the_senders_value() {
        let mut b = [0u8; 64];
        b[36..40].copy_from_slice(&[0x89, 0xab, 0xcd, 0xef]);
        b[63] = 0x30;
        let v = dec(&hex(&b)).unwrap();
        assert_eq!(v["opcode"], "RESP_SEND_IMM");
        assert_eq!(v["imm"], 0x89ab_cdef_u32);
        assert_eq!(v["status"], "SUCCESS");
    }

    #[test]
    fn numbers_take_decimal_or_hex() {
        assert_eq!(num::<u32>("0x10"), Ok(16));
        assert_eq!(num::<u32>("16"), Ok(16));
        for bad in ["256", "0xg", "+5", "1_000", " 16", "0x", "", "-1"] {
            assert!(num::<u8>(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hex_takes_hex_digits_only() {
        assert_eq!(hex_vec("0a:0B ff"), Ok(vec![0x0a, 0x0b, 0xff]));
        for bad in ["a\u{e9}b", "+f", "0g", "abc"] {
            assert!(hex_vec(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn remote_operands_only_where_the_opcode_has_them() {
        assert!(enc(
            "--op send --qpn 1 --pi 0 --sq-wqebbs 16 --raddr 0x10 --rkey 5 --sge 0x2000:8:3"
        )
        .is_err());
        assert!(
            enc("--op send --qpn 1 --pi 0 --sq-wqebbs 16 --free-wqebbs 17 --sge 0x2000:8:3")
                .is_err()
        );
    }

    #[test]
    fn non_completions_have_no_status_and_responders_no_wqe_opcode() {
        let mut b = [0u8; 64];
        b[63] = 0xf0;
        let v = dec(&hex(&b)).unwrap();
        assert_eq!(v["opcode"], "INVALID");
        assert!(v["status"].is_null());
        b[63] = 0x20;
        b[56] = 0x0a;
        let v = dec(&hex(&b)).unwrap();
        assert_eq!(
            (v["opcode"].as_str(), v["status"].as_str()),
            (Some("RESP_SEND"), Some("SUCCESS"))
        );
        assert!(v["wqe_opcode"].is_null());
    }
}
