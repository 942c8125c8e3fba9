//! Tests of the TCP exchange ([`super`]): the message's two versions and
//! swaps between them.

use super::*;

fn info(qpn: u32) -> ConnInfo {
    ConnInfo {
        endpoint: Endpoint {
            qpn,
            lid: 7,
            gid: [0xab; 16],
            gid_index: None,
            active_mtu: 3,
            roce: true,
        },
        psn: 0x12_3456,
        rkey: Rkey(0xdead_beef),
        addr: 0x1122_3344_5566_7788,
        len: 4096,
        qkey: 0x8000_1234,
        dc_key: None,
    }
}

/// The encoder before version 2, verbatim (its `[u8; 64]`, version 1, byte
/// 23 the RoCE bit alone): what an older peer sends.
fn old_encode(i: &ConnInfo) -> [u8; MSG_LEN] {
    let e = &i.endpoint;
    let mut m = [0u8; MSG_LEN];
    m[0..8].copy_from_slice(b"rdmadir\0");
    m[8..10].copy_from_slice(&1u16.to_be_bytes());
    m[12..16].copy_from_slice(&e.qpn.to_be_bytes());
    m[16..20].copy_from_slice(&i.psn.to_be_bytes());
    m[20..22].copy_from_slice(&e.lid.to_be_bytes());
    m[22] = e.active_mtu as u8;
    m[23] = e.roce as u8;
    m[24..40].copy_from_slice(&e.gid);
    m[40..44].copy_from_slice(&i.rkey.0.to_be_bytes());
    m[44..48].copy_from_slice(&i.qkey.to_be_bytes());
    m[48..56].copy_from_slice(&i.addr.to_be_bytes());
    m[56..64].copy_from_slice(&i.len.to_be_bytes());
    m
}

/// A DC target's facts: DCT 0x00ab_cdef, key 0x0102_0304_0506_0708.
fn dc_info() -> ConnInfo {
    info(1)
        .dc_target(0x00ab_cdef, 0x0102_0304_0506_0708)
        .unwrap()
}

#[test]
fn the_message_has_the_documented_layout_and_round_trips() {
    let i = info(0x00ab_cdef);
    let m = i.encode();
    assert_eq!(&m[0..8], b"rdmadir\0");
    assert_eq!(&m[8..10], &[0, 1]);
    assert_eq!(&m[12..16], &[0x00, 0xab, 0xcd, 0xef]);
    assert_eq!(&m[40..44], &[0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(&m[44..48], &[0x80, 0x00, 0x12, 0x34], "the qkey");
    assert_eq!(m[23], 1);
    assert_eq!(ConnInfo::decode(&m).unwrap(), i);
}

#[test]
fn a_foreign_or_newer_message_is_refused() {
    let mut m = info(1).encode();
    m[0] = b'X';
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
    let mut m = info(1).encode();
    m[9] = 3;
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
    let mut m = dc_info().encode();
    m[9] = 3;
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
    let mut m = info(1).encode();
    m[8] = 1; // version 0x0101
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
    let mut m = info(1).encode();
    m[12] = 1; // QPN over 24 bits
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
}

#[test]
// Native only: Miri has no sockets (its `setsockopt` is unsupported).
#[cfg_attr(miri, ignore)]
fn server_and_client_swap_over_tcp() {
    // Port 0: a port of the system's pick, bound before the client tries.
    let l = Listener::bind(0).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || {
        let (peer, mut s) = l.accept(&info(1)).unwrap();
        barrier(&mut s).unwrap();
        peer
    });
    let (peer, mut s) = connect("127.0.0.1", port, Duration::from_secs(10), &info(2)).unwrap();
    barrier(&mut s).unwrap();
    assert_eq!(peer.endpoint.qpn, 1);
    assert_eq!(server.join().unwrap().endpoint.qpn, 2);
}

#[test]
fn a_message_without_a_dc_key_is_version_1_and_the_old_encoders_bytes() {
    for roce in [false, true] {
        let mut i = info(0x12_3456);
        i.endpoint.roce = roce;
        let m = i.encode();
        assert_eq!(m.len(), MSG_LEN);
        assert_eq!(&m[8..10], &[0, 1], "version 1");
        assert_eq!(m[23] & 2, 0, "no DC-target flag");
        assert_eq!(m[..], old_encode(&i)[..], "what a build before v2 sent");
        assert_eq!(ConnInfo::decode(&m).unwrap(), i);
    }
}

#[test]
fn a_version_1_message_from_the_old_encoder_decodes_without_a_dc_key() {
    let i = info(0x00ab_cdef);
    let old = old_encode(&i);
    // As an array (the old `decode` signature) and as a slice.
    let d = ConnInfo::decode(&old).unwrap();
    assert_eq!(d, i);
    assert_eq!(d.dc_key, None);
    assert_eq!(ConnInfo::decode(&old[..]).unwrap(), i);
}

#[test]
fn a_dc_targets_message_is_version_2_with_the_key_at_64_and_flag_bit_1() {
    let i = dc_info();
    assert_eq!(
        i.endpoint.qpn, 0x00ab_cdef,
        "the QPN field is the DCT number"
    );
    assert_eq!(i.dc_key, Some(0x0102_0304_0506_0708));
    let m = i.encode();
    assert_eq!(m.len(), MSG_LEN_V2);
    assert_eq!(m.len(), 72);
    assert_eq!(&m[0..8], b"rdmadir\0");
    assert_eq!(&m[8..10], &[0, 2], "version 2");
    assert_eq!(&m[12..16], &[0x00, 0xab, 0xcd, 0xef], "the DCT number");
    assert_eq!(m[23], 0b11, "RoCE (bit 0) and DC target (bit 1)");
    assert_eq!(&m[64..72], &[1, 2, 3, 4, 5, 6, 7, 8], "the key, big-endian");
    // The first 64 bytes are a version-1 message's but for the version
    // and the flag.
    let mut head = m[..MSG_LEN].to_vec();
    head[9] = 1;
    head[23] &= !2;
    assert_eq!(head[..], old_encode(&i)[..]);
    assert_eq!(ConnInfo::decode(&m).unwrap(), i);
    // Without RoCE, and keys at the edges.
    for key in [0, 1, u64::MAX, 0x8000_0000_0000_0000] {
        let mut i = info(1).dc_target(1, key).unwrap();
        i.endpoint.roce = false;
        let m = i.encode();
        assert_eq!(m[23], 0b10);
        assert_eq!(&m[64..72], &key.to_be_bytes());
        assert_eq!(ConnInfo::decode(&m).unwrap(), i);
    }
}

#[test]
fn dc_target_keeps_the_other_fields() {
    let i = info(7).dc_target(0xff_ffff, 9).unwrap();
    let want = ConnInfo {
        endpoint: Endpoint {
            qpn: 0xff_ffff,
            ..info(7).endpoint
        },
        dc_key: Some(9),
        ..info(7)
    };
    assert_eq!(i, want);
}

#[test]
fn a_dct_number_of_0_or_over_24_bits_is_refused() {
    for dctn in [0, 0x100_0000, u32::MAX] {
        let r = info(1).dc_target(dctn, 5);
        match r {
            Err(Error::Config {
                value, min, max, ..
            }) => assert_eq!((value, min, max), (dctn as u64, 1, 0xff_ffff)),
            other => panic!("DCT number {dctn:#x}: {other:?}"),
        }
    }
    // A DCT number of 0 on the wire is refused too.
    let mut m = dc_info().encode();
    m[12..16].fill(0);
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
}

#[test]
fn a_truncated_or_overlong_message_is_refused() {
    let m = dc_info().encode();
    for n in [0, 9, 10, 63, 64, 71] {
        let r = ConnInfo::decode(&m[..n]);
        assert!(matches!(r, Err(Error::Exchange(_))), "{n} bytes: {r:?}");
    }
    let mut long = m.clone();
    long.push(0);
    assert!(matches!(ConnInfo::decode(&long), Err(Error::Exchange(_))));
    // A version-1 message with 8 bytes after it.
    let mut long = info(1).encode();
    long.extend_from_slice(&[0; 8]);
    assert!(matches!(ConnInfo::decode(&long), Err(Error::Exchange(_))));
    let short = info(1).encode();
    assert!(matches!(
        ConnInfo::decode(&short[..63]),
        Err(Error::Exchange(_))
    ));
}

#[test]
fn the_dc_flag_and_the_version_must_agree() {
    // Version 1 with the flag: it says the key follows, but version 1 has
    // none.
    let mut m = info(1).encode();
    m[23] |= 2;
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
    // Version 2 without it.
    let mut m = dc_info().encode();
    m[23] &= !2;
    assert!(matches!(ConnInfo::decode(&m), Err(Error::Exchange(_))));
}

/// A v1 sender and a v2 (DC target) sender swap over loopback TCP, each
/// side once the server and once the client.
#[test]
#[cfg_attr(miri, ignore)]
fn a_version_1_and_a_version_2_sender_swap_over_tcp_both_ways() {
    let v1 = info(0x42);
    let v2 = dc_info();
    for (server_sends, client_sends) in [(v1, v2), (v2, v1)] {
        let l = Listener::bind(0).unwrap();
        let port = l.port();
        let server = std::thread::spawn(move || {
            let (peer, mut s) = l.accept(&server_sends).unwrap();
            // A second swap on the same stream, lengths the other way.
            let again = swap(&mut s, &client_sends).unwrap();
            barrier(&mut s).unwrap();
            (peer, again)
        });
        let (peer, mut s) =
            connect("127.0.0.1", port, Duration::from_secs(10), &client_sends).unwrap();
        let again = swap(&mut s, &server_sends).unwrap();
        barrier(&mut s).unwrap();
        assert_eq!(peer, server_sends);
        assert_eq!(again, client_sends);
        let (server_got, server_again) = server.join().unwrap();
        assert_eq!(server_got, client_sends);
        assert_eq!(server_again, server_sends);
    }
}

/// An older peer (the old encoder's 64 bytes written raw) and a DC target
/// swap: the DC target reads the 64 bytes and no more.
#[test]
#[cfg_attr(miri, ignore)]
fn an_old_peers_raw_64_bytes_are_read_by_a_dc_target() {
    let l = Listener::bind(0).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || l.accept(&dc_info()).unwrap().0);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&old_encode(&info(3))).unwrap();
    let mut got = [0u8; MSG_LEN_V2];
    s.read_exact(&mut got).unwrap();
    assert_eq!(ConnInfo::decode(&got).unwrap(), dc_info());
    assert_eq!(server.join().unwrap(), info(3));
}

/// A peer that says version 2 and closes after 64 bytes: the reader waits
/// for the 8 more and says how many of 72 came.
#[test]
#[cfg_attr(miri, ignore)]
fn a_version_2_message_cut_short_on_the_wire_is_refused() {
    let l = Listener::bind(0).unwrap();
    let port = l.port();
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(&dc_info().encode()[..MSG_LEN]).unwrap();
        let mut theirs = [0u8; MSG_LEN];
        s.read_exact(&mut theirs).unwrap();
        // Close with the key unsent.
    });
    let r = l.accept(&info(1));
    client.join().unwrap();
    match r {
        Err(Error::Exchange(m)) => assert!(m.contains("64 of 72"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// The async exchange reads both lengths too.
#[test]
#[cfg_attr(miri, ignore)]
fn the_async_exchange_reads_a_version_2_message() {
    let l = Listener::bind(0).unwrap();
    let port = l.port();
    let server = std::thread::spawn(move || l.accept(&info(5)).unwrap().0);
    let (peer, _s) = block_on(connect_async(
        "127.0.0.1",
        port,
        Duration::from_secs(10),
        &dc_info(),
    ))
    .unwrap();
    assert_eq!(peer, info(5));
    assert_eq!(server.join().unwrap(), dc_info());
}

/// An RC or UC QP is not connected to a DC target's facts.
#[test]
fn connect_qp_refuses_a_dc_target_peer() {
    let ctx = crate::Context::open("sim").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut a = pd.create_qp(&crate::QpConfig::default()).unwrap();
    let mine = ConnInfo::of(&a, 1);
    let r = connect_qp(&mut a, &mine, &dc_info());
    assert!(matches!(r, Err(Error::Invalid(_))), "{r:?}");
    assert_eq!(a.state(), crate::QpState::Reset);
}
