//! The peer protocols' shared pieces: one command line out and one answer
//! line back over TCP (`OK <rest>` or `ERR <why>`), the server's loop, and
//! the commands and answers both protocols (the RC cases' and [`super::far`]'s)
//! speak: the MR commands, SGEs, `POLL`'s completions and `QUERY`'s state.

use super::super::Polled;
use super::{dereg, peer_mr, Failure, PeerMr};
use rdma_direct::{Access, Completion, Mr, Pd, QpState, Rkey, SrcQp, WcOpcode, WcStatus};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Sends `line` and reads the answer: the rest of an `OK` line, or a
/// failure naming the command the peer refused.
pub(super) fn tcp_call(
    out: &mut TcpStream,
    inp: &mut BufReader<TcpStream>,
    line: &str,
) -> Result<String, Failure> {
    writeln!(out, "{line}").map_err(|e| Failure(format!("peer: send: {e}")))?;
    let mut answer = String::new();
    inp.read_line(&mut answer)
        .map_err(|e| Failure(format!("peer: receive: {e}")))?;
    let answer = answer.trim_end();
    match answer.strip_prefix("OK") {
        Some(rest) => Ok(rest.trim_start().to_string()),
        None => Err(Failure(format!(
            "peer refused `{}`: {answer}",
            line.split(' ').next().unwrap_or("")
        ))),
    }
}

/// Answers each command line on `tcp` with `answer` (`OK`, `OK <rest>` or
/// `ERR <why>`) until `BYE` or the client goes away.
pub(super) fn serve_lines(
    tcp: TcpStream,
    mut answer: impl FnMut(&str) -> Result<String, Failure>,
) -> rdma_direct::Result<()> {
    let mut out = tcp
        .try_clone()
        .map_err(|e| rdma_direct::Error::Exchange(format!("socket: {e}")))?;
    let mut inp = BufReader::new(tcp);
    loop {
        let mut line = String::new();
        if inp.read_line(&mut line).unwrap_or(0) == 0 {
            return Ok(()); // the client went away: next case
        }
        let line = line.trim_end();
        let text = match answer(line) {
            Ok(a) if a.is_empty() => "OK".to_string(),
            Ok(a) => format!("OK {a}"),
            Err(e) => format!("ERR {}", e.0),
        };
        if writeln!(out, "{text}").is_err() || line.starts_with("BYE") {
            return Ok(());
        }
    }
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

pub(super) fn bad(what: &str) -> Failure {
    Failure(format!("peer: malformed answer to {what}"))
}

/// An SGE of a command, `<id>:<offset>:<len>`: three decimal numbers, the
/// offset within usize and the length within u32; anything else is refused.
pub(super) fn parse_sge(p: &str) -> Result<(u64, usize, u32), Failure> {
    let bad = || Failure(format!("SGE `{p}` is not <id>:<offset>:<len>"));
    let x = p
        .split(':')
        .map(|v| v.parse::<u64>().ok())
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(bad)?;
    let [id, off, len] = x[..] else {
        return Err(bad());
    };
    let off = usize::try_from(off).map_err(|_| bad())?;
    let len = u32::try_from(len).map_err(|_| bad())?;
    Ok((id, off, len))
}

/// The MR commands both protocols share (`REG`, `WRITE`, `READ`,
/// `DEREG`); `None` for any other.
pub(super) fn mr_command(
    line: &str,
    pd: &Pd,
    mrs: &mut Vec<Option<Mr>>,
) -> Option<Result<String, Failure>> {
    let f: Vec<&str> = line.split(' ').collect();
    let num = |i: usize| -> Result<u64, Failure> {
        f.get(i)
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| Failure(format!("argument {i} of `{line}`")))
    };
    let r = (|| match f.first().copied().unwrap_or("") {
        "REG" => {
            let access = u32::try_from(num(2)?)
                .ok()
                .and_then(Access::from_bits)
                .ok_or_else(|| Failure("access bits".into()))?;
            let m = pd.alloc_mr(num(1)? as usize, access)?;
            let a = format!("{} {} {}", mrs.len(), m.addr(), m.rkey().0);
            mrs.push(Some(m));
            Ok(Some(a))
        }
        "WRITE" => {
            let data =
                unhex(f.get(3).copied().unwrap_or("")).ok_or_else(|| Failure("hex".into()))?;
            peer_mr(mrs, num(1)?)?.write(num(2)? as usize, &data)?;
            Ok(Some(String::new()))
        }
        "READ" => {
            let m = peer_mr(mrs, num(1)?)?;
            let len = num(3)? as usize;
            if len > 16 << 20 {
                return Err(Failure("READ of more than 16 MiB".into()));
            }
            let mut v = vec![0; len];
            m.read(num(2)? as usize, &mut v)?;
            Ok(Some(hex(&v)))
        }
        "DEREG" => Ok(Some(dereg(pd, mrs, num(1)?)?.to_string())),
        _ => Ok(None),
    })();
    r.transpose()
}

/// `POLL <count> <timeout ms>`'s answer: up to `count` completions of
/// `cq` within the timeout (at most 60 s), each
/// `<wr_id>:<status>:<opcode>:<byte_len>:<imm or ->:<qp_num>:<src_qp>`.
pub(super) fn poll_text<C: Polled>(cq: &mut C, count: usize, ms: u64) -> Result<String, Failure> {
    let deadline = Instant::now() + Duration::from_millis(ms.min(60_000));
    let mut got = Vec::new();
    let mut wc = [Completion::default(); 32];
    while got.len() < count && Instant::now() < deadline {
        let room = (count - got.len()).min(wc.len());
        let n = cq.poll_cq(&mut wc[..room])?;
        got.extend_from_slice(&wc[..n]);
        if n == 0 {
            std::thread::yield_now();
        }
    }
    Ok(got
        .iter()
        .map(completion_text)
        .collect::<Vec<_>>()
        .join(" "))
}

/// The completions of a [`poll_text`] answer.
pub(super) fn parse_completions(a: &str) -> Result<Vec<Completion>, Failure> {
    a.split(' ')
        .filter(|x| !x.is_empty())
        .map(|c| parse_completion(c).ok_or_else(|| bad("POLL")))
        .collect()
}

fn completion_text(c: &Completion) -> String {
    format!(
        "{}:{}:{}:{}:{}:{}:{}",
        c.wr_id,
        c.status.0,
        c.opcode.0,
        c.byte_len,
        c.imm.map_or("-".to_string(), |i| i.to_string()),
        c.qp_num,
        c.src_qp.0
    )
}

fn parse_completion(s: &str) -> Option<Completion> {
    let f: Vec<&str> = s.split(':').collect();
    let [wr_id, status, opcode, byte_len, imm, qp_num, src_qp] = f[..] else {
        return None;
    };
    let n = |x: &str| x.parse::<u64>().ok();
    Some(Completion {
        wr_id: n(wr_id)?,
        status: WcStatus(n(status)? as u32),
        opcode: WcOpcode(n(opcode)? as u32),
        byte_len: n(byte_len)? as u32,
        imm: if imm == "-" {
            None
        } else {
            Some(n(imm)? as u32)
        },
        qp_num: n(qp_num)? as u32,
        vendor_err: 0,
        src_qp: SrcQp(n(src_qp)? as u32),
        // (Not on the wire: the peers' CQs have no timestamps.)
        timestamp: 0,
    })
}

/// `REG`'s answer, `<id> <addr> <rkey>`.
pub(super) fn parse_reg(a: &str) -> Result<PeerMr, Failure> {
    let f: Vec<u64> = a.split(' ').filter_map(|x| x.parse().ok()).collect();
    match f[..] {
        [id, addr, rkey] => Ok(PeerMr {
            id: u32::try_from(id).map_err(|_| bad("REG"))?,
            addr,
            rkey: Rkey(u32::try_from(rkey).map_err(|_| bad("REG"))?),
        }),
        _ => Err(bad("REG")),
    }
}

/// `RECV <wr_id> <id>:<offset>:<len>,...` (`-` for no SGE).
pub(super) fn recv_command(wr_id: u64, sges: &[(PeerMr, usize, u32)]) -> String {
    let list: Vec<String> = sges
        .iter()
        .map(|(m, o, l)| format!("{}:{o}:{l}", m.id))
        .collect();
    let list = if list.is_empty() {
        "-".into()
    } else {
        list.join(",")
    };
    format!("RECV {wr_id} {list}")
}

/// `QUERY`'s answer: a QP state as Rust's debug form spells it.
pub(super) fn parse_state(a: &str) -> Result<QpState, Failure> {
    match a {
        "Reset" => Ok(QpState::Reset),
        "Init" => Ok(QpState::Init),
        "Rtr" => Ok(QpState::Rtr),
        "Rts" => Ok(QpState::Rts),
        "Err" => Ok(QpState::Err),
        _ => Err(bad("QUERY")),
    }
}
