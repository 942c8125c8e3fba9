//! `encode-wqe` and `decode-cqe`: see exactly what goes on the ring.
//! Part of the `rdma-direct` binary (feature `cli`).

use clap::{Args, ValueEnum};
use mlx5_dv::cqe::{sw_owned, Cqe};
use mlx5_dv::doorbell::sq_dbrec;
use mlx5_dv::prm::{CqeOpcode, CtrlFlags, WqeOpcode, DS, MAX_DS, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{
    datagram_seg, dc_datagram_seg, decode_datagram_seg, decode_dc_datagram_seg, write_send_wqe,
    AtomicSeg, AtomicSize, DataSeg, Datagram, MaskedAtomic, Payload, RemoteSeg, SendWqe,
    SqGeometry, AV_DQP_DCT, DATAGRAM_SEG,
};
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

/// `s` without whitespace, colons and a leading `0x`.
fn hex_digits(s: &str) -> String {
    let h: String = s
        .chars()
        .filter(|c| !c.is_whitespace() && *c != ':')
        .collect();
    h.strip_prefix("0x").map_or(h.clone(), str::to_string)
}

fn hex_vec(s: &str) -> Result<Vec<u8>, String> {
    let h = hex_digits(s);
    let h = h.as_str();
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

/// An address vector given as hex (`--av`): the 48 bytes of `struct
/// mlx5_wqe_av` as an address handle holds them (`mlx5dv_ah.av`).
#[derive(Clone, Debug)]
pub struct AvBytes([u8; DATAGRAM_SEG]);

fn av_hex(s: &str) -> Result<AvBytes, String> {
    let n = hex_digits(s).len();
    if n != 2 * DATAGRAM_SEG {
        return Err(format!(
            "{n} hex digits: an AV (struct mlx5_wqe_av) is {DATAGRAM_SEG} bytes, {} digits",
            2 * DATAGRAM_SEG
        ));
    }
    let v = hex_vec(s)?;
    Ok(AvBytes(v.try_into().map_err(|_| "an AV is 48 bytes")?))
}

/// A UD destination (`--ud QPN:QKEY`).
#[derive(Clone, Copy, Debug)]
pub struct UdDest {
    qpn: u32,
    qkey: u32,
}

fn ud_dest(s: &str) -> Result<UdDest, String> {
    let Some((q, k)) = s.split_once(':') else {
        return Err(format!("{s:?}: a UD destination is QPN:QKEY"));
    };
    let qpn: u32 = num(q)?;
    if qpn > 0xff_ffff {
        return Err(format!("QPN {qpn:#x} does not fit 24 bits"));
    }
    Ok(UdDest { qpn, qkey: num(k)? })
}

/// A DC destination (`--dc DCTN:KEY`).
#[derive(Clone, Copy, Debug)]
pub struct DcArg {
    dctn: u32,
    key: u64,
}

fn dc_dest(s: &str) -> Result<DcArg, String> {
    let Some((n, k)) = s.split_once(':') else {
        return Err(format!("{s:?}: a DC destination is DCTN:KEY"));
    };
    Ok(DcArg {
        dctn: num(n)?,
        key: num(k)?,
    })
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
    /// Masked compare-and-swap (`--size 4|8`, `--swap-mask`, `--compare-mask`).
    MaskedCas,
    /// Masked fetch-and-add (`--size 4|8`; `--compare` is the field boundaries).
    MaskedFaa,
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
            Op::MaskedCas => WqeOpcode::ATOMIC_MASKED_CS,
            Op::MaskedFaa => WqeOpcode::ATOMIC_MASKED_FA,
        }
    }
}

/// Encode one send WQE into an SQ ring and print its segments as JSON: an
/// RC WQE, or with `--av` a UD (`--ud`) or DC (`--dc`) WQE, whose datagram
/// segment follows the ctrl segment and is shown field by field.
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
    /// Compare value (cas, masked-cas) or field boundaries (masked-faa).
    #[arg(long, value_parser = num::<u64>)]
    compare: Option<u64>,
    /// Swap value (cas, masked-cas) or value to add (faa, masked-faa).
    #[arg(long = "swap-add", value_parser = num::<u64>)]
    swap_add: Option<u64>,
    /// Masked atomics: the operand size in bytes, 4 or 8 (the ctrl
    /// segment's opmod: 8 | (log2(size) - 2)).
    #[arg(long, value_parser = num::<u32>)]
    size: Option<u32>,
    /// masked-cas: the bits of --swap-add stored [default: 0].
    #[arg(long = "swap-mask", value_parser = num::<u64>)]
    swap_mask: Option<u64>,
    /// masked-cas: the bits compared [default: 0].
    #[arg(long = "compare-mask", value_parser = num::<u64>)]
    compare_mask: Option<u64>,
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
    /// The address handle's 48-byte AV (struct mlx5_wqe_av) as 96 hex
    /// digits, for --ud or --dc.
    #[arg(long, value_parser = av_hex)]
    av: Option<AvBytes>,
    /// UD: send or send-imm to QPN:QKEY (24-bit QPN, 32-bit qkey) through --av.
    #[arg(long, value_parser = ud_dest)]
    ud: Option<UdDest>,
    /// DC: any operation to DCT number DCTN (24 bits) with DC key KEY
    /// (64 bits, decimal or 0x hex) through --av.
    #[arg(long, value_parser = dc_dest)]
    dc: Option<DcArg>,
}

/// The operands of `--op masked-cas` / `masked-faa` (`None` for another
/// operation, which must give none of `--size`, `--swap-mask`,
/// `--compare-mask`); the codec checks their alignment and width.
fn masked(a: &EncodeWqe) -> Result<Option<MaskedAtomic>, String> {
    let cs = match a.op {
        Op::MaskedCas => true,
        Op::MaskedFaa => false,
        _ if a.size.is_some() || a.swap_mask.is_some() || a.compare_mask.is_some() => {
            return Err(
                "--size, --swap-mask and --compare-mask are for masked-cas and masked-faa".into(),
            )
        }
        _ => return Ok(None),
    };
    let size = a
        .size
        .and_then(AtomicSize::from_bytes)
        .ok_or("masked-cas and masked-faa need --size 4 or --size 8")?;
    if !cs && (a.swap_mask.is_some() || a.compare_mask.is_some()) {
        return Err("masked-faa takes no masks (--compare is its field boundaries)".into());
    }
    let (Some(swap_add), Some(compare)) = (a.swap_add, a.compare) else {
        return Err("masked-cas and masked-faa need --swap-add and --compare".into());
    };
    Ok(Some(MaskedAtomic {
        size,
        swap_add,
        compare,
        swap_mask: a.swap_mask.unwrap_or(0),
        compare_mask: a.compare_mask.unwrap_or(0),
    }))
}

/// The datagram segment `--av` with `--ud` or `--dc` makes, checked
/// against the operation; `Ok(None)` for an RC WQE.
fn datagram(a: &EncodeWqe) -> Result<Option<(Transport, [u8; DATAGRAM_SEG])>, String> {
    match (&a.av, a.ud, a.dc) {
        (_, Some(_), Some(_)) => Err("give --ud or --dc, not both".into()),
        (None, Some(_), None) => Err("--ud needs --av (the 48-byte AV as 96 hex digits)".into()),
        (None, None, Some(_)) => Err("--dc needs --av (the 48-byte AV as 96 hex digits)".into()),
        (Some(_), None, None) => Err("--av is for --ud or --dc".into()),
        (None, None, None) => Ok(None),
        (Some(av), Some(u), None) => {
            if !matches!(a.op, Op::Send | Op::SendImm) {
                return Err("--ud is for send and send-imm (UD has no RDMA or atomics)".into());
            }
            Ok(Some((Transport::Ud, datagram_seg(&av.0, u.qpn, u.qkey))))
        }
        (Some(av), None, Some(d)) => dc_datagram_seg(&av.0, d.dctn, d.key)
            .map(|s| Some((Transport::Dc, s)))
            .map_err(|e| format!("--dc: {e}")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    Ud,
    Dc,
}

/// The JSON of the datagram segment written at ring offset `off`.
fn datagram_json(t: Transport, off: usize, seg: &[u8; DATAGRAM_SEG]) -> Value {
    let dqp_dct = hex(&seg[AV_DQP_DCT..AV_DQP_DCT + 4]);
    match t {
        Transport::Ud => {
            let d = decode_datagram_seg(seg);
            json!({
                "transport": "ud", "offset": off, "remote_qpn": d.remote_qpn,
                "qkey": d.qkey, "dqp_dct": dqp_dct, "hex": hex(seg),
            })
        }
        Transport::Dc => {
            let d = decode_dc_datagram_seg(seg);
            json!({
                "transport": "dc", "offset": off, "dctn": d.dctn,
                "dc_key": format!("{:#018x}", d.dc_key), "dqp_dct": dqp_dct, "hex": hex(seg),
            })
        }
    }
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
    let masked = masked(a)?;
    let atomic = match (a.op, a.swap_add, a.compare) {
        (Op::MaskedCas | Op::MaskedFaa, ..) => None,
        (Op::Cas, Some(swap_add), Some(compare)) => Some(AtomicSeg { swap_add, compare }),
        (Op::Cas, _, _) => return Err("cas needs --swap-add and --compare".into()),
        (Op::Faa, Some(swap_add), None) => Some(AtomicSeg {
            swap_add,
            compare: 0,
        }),
        (Op::Faa, _, _) => return Err("faa needs --swap-add (and no --compare)".into()),
        (_, None, None) => None,
        _ => return Err("--swap-add and --compare are for the atomics".into()),
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
    let dgram = datagram(a)?;
    let raddr_ds = opcode.has_raddr() as u32;
    let dgram_ds = if dgram.is_some() {
        (DATAGRAM_SEG / DS) as u32
    } else {
        0
    };
    let fits = ((MAX_DS - 1 - raddr_ds - dgram_ds) * DS as u32).saturating_sub(4);
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
        datagram: dgram.as_ref().map(|(t, seg)| match t {
            Transport::Ud => Datagram::Ud(seg),
            Transport::Dc => Datagram::Dc(seg),
        }),
        opcode,
        flags,
        imm: a.imm.unwrap_or(0),
        remote,
        masked: masked.as_ref(),
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
    let mut v = json!({
        "ds": w.ds,
        "wqebbs": w.wqebbs,
        "next_pi": w.next_pi,
        "sq_dbrec": hex(&sq_dbrec(w.next_pi).to_be_bytes()),
        "segments": segments,
    });
    if let Some((t, _)) = dgram {
        // WQE bytes 16..64: ctrl and the datagram segment fill the WQE's
        // first WQEBB, so the segment never crosses the ring's end.
        let off = base + DS;
        let seg: [u8; DATAGRAM_SEG] = mem[off..off + DATAGRAM_SEG].try_into().unwrap();
        v["datagram"] = datagram_json(t, off, &seg);
    }
    Ok(v)
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
#[path = "codec_tests.rs"]
mod tests;
