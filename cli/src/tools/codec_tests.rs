//! `encode-wqe` and `decode-cqe` (`codec.rs`): bytes by hand, arguments
//! checked, every operation.

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
    assert!(
        enc("--op send --qpn 1 --pi 0 --sq-wqebbs 16 --raddr 0x10 --rkey 5 --sge 0x2000:8:3")
            .is_err()
    );
    assert!(
        enc("--op send --qpn 1 --pi 0 --sq-wqebbs 16 --free-wqebbs 17 --sge 0x2000:8:3").is_err()
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

/// A 4-byte masked compare-and-swap by hand (opmod 0x08, the four 32-bit
/// operands big-endian in one segment, a 4-byte data segment), an 8-byte
/// one in 5 DS over two WQEBBs (opmod 0x09), and the argument checks.
#[test]
fn masked_atomics_by_hand() {
    let v = enc(
        "--op masked-cas --size 4 --qpn 0x1234 --pi 0 --sq-wqebbs 8 --raddr 0x1004 --rkey 7 \
         --sge 0x5000:4:9 --swap-add 0x11223344 --compare 0x55667788 --swap-mask 0x99aabbcc \
         --compare-mask 0xddeeff00",
    )
    .unwrap();
    assert_eq!((v["ds"].as_u64(), v["wqebbs"].as_u64()), (Some(4), Some(1)));
    assert_eq!(v["segments"][0]["hex"], "08000014001234040000000000000000");
    assert_eq!(v["segments"][2]["hex"], "112233445566778899aabbccddeeff00");
    assert_eq!(v["segments"][3]["hex"], "00000004000000090000000000005000");
    let v = enc(
        "--op masked-cas --size 8 --qpn 1 --pi 0 --sq-wqebbs 8 --raddr 0x1008 --rkey 7 \
         --sge 0x5000:8:9 --swap-add 1 --compare 2 --swap-mask 3 --compare-mask 4",
    )
    .unwrap();
    assert_eq!((v["ds"].as_u64(), v["wqebbs"].as_u64()), (Some(5), Some(2)));
    assert_eq!(v["segments"][0]["hex"], "09000014000001050000000000000000");
    assert_eq!(v["segments"][3]["hex"], "00000000000000030000000000000004");
    let v = enc(
        "--op masked-faa --size 8 --qpn 1 --pi 0 --sq-wqebbs 8 --raddr 0x1008 --rkey 7 \
         --sge 0x5000:8:9 --swap-add 1 --compare 0x8000000080000000",
    )
    .unwrap();
    assert_eq!(v["segments"][0]["hex"], "09000015000001040000000000000000");
    assert_eq!(v["segments"][2]["hex"], "00000000000000018000000080000000");
    let base = "--qpn 1 --pi 0 --sq-wqebbs 8 --raddr 0x1002 --rkey 7 --sge 0x5000:4:9";
    for (args, says) in [
        (
            "--op masked-cas --swap-add 1 --compare 2",
            "--size 4 or --size 8",
        ),
        (
            "--op masked-faa --size 4 --swap-add 1 --compare 2 --swap-mask 1",
            "no masks",
        ),
        (
            "--op masked-faa --size 4 --swap-add 1",
            "--swap-add and --compare",
        ),
        (
            "--op cas --swap-add 1 --compare 2 --size 8",
            "are for masked-cas",
        ),
        (
            "--op masked-faa --size 4 --swap-add 1 --compare 2",
            "not 4-byte aligned",
        ),
    ] {
        let e = enc(&format!("{args} {base}")).unwrap_err();
        assert!(e.contains(says), "{args}: {e}");
    }
}
