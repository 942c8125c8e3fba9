//! `encode-wqe` and `decode-cqe`: see exactly what goes on the ring.
//! Part of the `rdma-direct` binary (feature `cli`).

use clap::{Args, ValueEnum};
use mlx5_dv::cqe::{sw_owned, Cqe};
use mlx5_dv::doorbell::sq_dbrec;
use mlx5_dv::prm::{CqeOpcode, CtrlFlags, WqeOpcode, DS, MAX_DS, WQEBB};
use mlx5_dv::ring::RingBuf;
use mlx5_dv::wqe::{
    datagram_seg, dc_datagram_seg, decode_datagram_seg, decode_dc_datagram_seg, write_send_wqe,
    AtomicSeg, DataSeg, Datagram, Payload, RemoteSeg, SendWqe, SqGeometry, AV_DQP_DCT,
    DATAGRAM_SEG,
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
        masked: None,
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

    /// The AV of bytes 1..=48 with `dqp_dct` (bytes 8..12) `5a000000`:
    /// bits the address handle set there, which DC keeps and UD overwrites.
    fn av() -> String {
        let mut b: Vec<u8> = (1..=48).collect();
        b[8..12].copy_from_slice(&[0x5a, 0, 0, 0]);
        hex(&b)
    }

    fn segs_hex(v: &Value, r: std::ops::Range<usize>) -> String {
        r.map(|i| v["segments"][i]["hex"].as_str().unwrap().to_string())
            .collect()
    }

    /// A DC WRITE in the ring's last WQEBB: ctrl and the datagram segment
    /// fill it (DC key at bytes 0..8, `dqp_dct` = the AV's `5a` | 0x80 |
    /// DCTN), the raddr and data segments wrap to the ring's start.
    #[test]
    fn a_dc_write_shows_its_datagram_segment() {
        let v = enc(&format!(
            "--op write --qpn 0x1234 --pi 7 --sq-wqebbs 8 --raddr 0x1000 --rkey 5 \
             --sge 0x2000:64:9 --av {} --dc 0x123456:0x0102030405060708",
            av()
        ))
        .unwrap();
        assert_eq!((v["ds"].as_u64(), v["wqebbs"].as_u64()), (Some(6), Some(2)));
        let d = &v["datagram"];
        assert_eq!(d["transport"], "dc");
        assert_eq!(d["offset"], 7 * 64 + 16);
        assert_eq!(d["dctn"], 0x12_3456);
        assert_eq!(d["dc_key"], "0x0102030405060708");
        assert_eq!(d["dqp_dct"], "da123456");
        let h = d["hex"].as_str().unwrap();
        assert_eq!(&h[..24], "0102030405060708da123456");
        assert_eq!(&h[24..], &av()[24..], "the rest of the AV");
        assert_eq!(segs_hex(&v, 1..4), h, "segments 1..4 are the datagram");
        assert_eq!(v["segments"][4]["offset"], 0);
        assert_eq!(v["segments"][4]["hex"], "00000000000010000000000500000000");
        assert_eq!(v["segments"][5]["hex"], "00000040000000090000000000002000");
    }

    /// A UD SEND_IMM: qkey at 0..4, bytes 4..8 the AV's, `dqp_dct`
    /// overwritten with 0x80 | QPN.
    #[test]
    fn a_ud_send_shows_qpn_and_qkey() {
        let v = enc(&format!(
            "--op send-imm --imm 7 --qpn 1 --pi 0 --sq-wqebbs 8 --sge 0x2000:64:9 \
             --av {} --ud 0x4321:0x11112222",
            av()
        ))
        .unwrap();
        assert_eq!(v["ds"], 5);
        let d = &v["datagram"];
        assert_eq!(
            (
                d["transport"].as_str(),
                d["remote_qpn"].as_u64(),
                d["qkey"].as_u64()
            ),
            (Some("ud"), Some(0x4321), Some(0x1111_2222))
        );
        assert_eq!(d["dqp_dct"], "80004321");
        assert_eq!(
            &d["hex"].as_str().unwrap()[..24],
            "111122220506070880004321"
        );
        assert!(enc("--op send --qpn 1 --pi 0 --sq-wqebbs 8 --sge 0:4:1")
            .unwrap()
            .get("datagram")
            .is_none());
    }

    /// Every operation over DC, DS counted with the datagram's 3; the
    /// default max inline leaves room for them (924 bytes on a WRITE: 63 DS).
    #[test]
    fn every_operation_over_dc() {
        let dc = format!("--qpn 1 --pi 3 --sq-wqebbs 16 --av {} --dc 9:9", av());
        for (op, ds) in [
            ("send --sge 0:4:1", 5),
            ("send-imm --imm 1 --inline-hex 00", 5),
            ("write --raddr 0 --rkey 1 --sge 0:4:1 --sge 8:4:1", 7),
            ("write-imm --imm 1 --raddr 0 --rkey 1 --sge 0:4:1", 6),
            ("read --raddr 0 --rkey 1 --sge 0:4:1", 6),
            (
                "cas --raddr 8 --rkey 1 --sge 0:8:1 --swap-add 1 --compare 2",
                7,
            ),
            ("faa --raddr 8 --rkey 1 --sge 0:8:1 --swap-add 1", 7),
        ] {
            let v = enc(&format!("--op {op} {dc}")).unwrap();
            assert_eq!(v["ds"], ds, "{op}");
            assert_eq!(v["datagram"]["dctn"], 9, "{op}");
        }
        let write = format!("--op write --raddr 0 --rkey 1 {dc} --inline-hex");
        let v = enc(&format!("{write} {}", "ab".repeat(924))).unwrap();
        assert_eq!(v["ds"], 63);
        assert!(enc(&format!("{write} {}", "ab".repeat(925))).is_err());
    }

    #[test]
    fn datagram_arguments_are_checked() {
        let base = "--qpn 1 --pi 0 --sq-wqebbs 8 --sge 0:4:1";
        let av = av();
        for (args, want) in [
            (format!("--op send --av {av} --ud 1:2 --dc 1:2"), "not both"),
            ("--op send --ud 1:2".to_string(), "--ud needs --av"),
            ("--op send --dc 1:2".to_string(), "--dc needs --av"),
            (format!("--op send --av {av}"), "--av is for --ud or --dc"),
            (
                format!("--op write --raddr 0 --rkey 1 --av {av} --ud 1:2"),
                "--ud is for send and send-imm",
            ),
            (
                format!("--op send --av {} --dc 1:2", &av[..94]),
                "94 hex digits",
            ),
            (format!("--op send --av {av}00 --dc 1:2"), "98 hex digits"),
            (
                format!("--op send --av {av} --dc 0x1000000:2"),
                "does not fit 24 bits",
            ),
            (
                format!("--op send --av {av} --ud 0x1000000:2"),
                "does not fit 24 bits",
            ),
            (format!("--op send --av {av} --dc 5"), "DCTN:KEY"),
            (format!("--op send --av {av} --ud 5"), "QPN:QKEY"),
            (
                format!("--op send --av {av} --dc 5:0x10000000000000000"),
                "out of range",
            ),
        ] {
            let e = enc(&format!("{args} {base}")).expect_err(&args);
            assert!(e.contains(want), "{args}: {e:?} lacks {want:?}");
        }
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
