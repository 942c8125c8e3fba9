//! Out-of-band connection exchange over TCP: each side sends what the other
//! needs to reach its QP and memory (perftest exchanges the same facts in
//! its `pingpong_dest`), then reads the peer's.
//!
//! The message is 64 bytes (version 1) or 72 (version 2, a DC target's),
//! every field big-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 8 | magic `b"rdmadir\0"` |
//! | 8 | 2 | version: 1, or 2 when the sender is a DC target ([`VERSION`] is the newest) |
//! | 10 | 2 | reserved, 0 |
//! | 12 | 4 | QPN (24 bits); a DC target's DCT number (flag bit 1) |
//! | 16 | 4 | first PSN the sender sends (24 bits) |
//! | 20 | 2 | LID (InfiniBand; 0 on RoCE) |
//! | 22 | 1 | active MTU (`enum ibv_mtu`; 0: none, the sim) |
//! | 23 | 1 | flags: bit 0 RoCE (the address vector must be global); bit 1 DC target: the QPN field is the DCT number and bytes 64..72 its DC access key (set exactly when the version is 2) |
//! | 24 | 16 | GID |
//! | 40 | 4 | rkey of the buffer offered |
//! | 44 | 4 | qkey of a UD QP (0 for RC and UC; a build before the field sent 0) |
//! | 48 | 8 | address of the buffer offered |
//! | 56 | 8 | length of the buffer offered, bytes |
//! | 64 | 8 | version 2 only: the DC target's DC access key (`dc_key`, big-endian) |
//!
//! A side that is not a DC target ([`ConnInfo::dc_key`] `None`) sends
//! version 1, [`MSG_LEN`] bytes, exactly what builds before version 2 sent
//! and read, so they keep working with it; a DC target sends version 2,
//! [`MSG_LEN_V2`] bytes (a build before version 2 refuses it, by its
//! version). The reader takes the first 64 bytes and, when their version is
//! 2, 8 more. A message with another magic or version, a version-2
//! message without the DC-target flag or a version-1 message with it, or
//! one cut short, is refused with a clear error.

use crate::connect::cm_wait::{block_on, next_serial, Awaited, Blocking, FdWait};
use crate::reactor::deadline_after;
use crate::{Endpoint, Error, Mr, Qp, Result, Rkey};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// The newest version of the message layout above this build reads and
/// sends: 2 (a DC target's message). It still sends version 1 when the
/// sender is not a DC target ([`ConnInfo::encode`]).
pub const VERSION: u16 = 2;
/// Size of a version-1 message in bytes, and of the first part of any
/// message (what the reader takes before it knows the version).
pub const MSG_LEN: usize = 64;
/// Size of a version-2 message (a DC target's) in bytes: [`MSG_LEN`] and
/// the 8-byte DC access key at bytes 64..72.
pub const MSG_LEN_V2: usize = 72;
/// Flags byte (23): RoCE.
const FLAG_ROCE: u8 = 1;
/// Flags byte (23): DC target (the QPN field is the DCT number, bytes
/// 64..72 its DC key).
const FLAG_DC: u8 = 1 << 1;
/// perftest's default TCP port (`-p`).
pub const DEFAULT_PORT: u16 = 18515;
const MAGIC: [u8; 8] = *b"rdmadir\0";

/// What one side tells the other.
///
/// [`Self::encode`] makes a version-1 message ([`MSG_LEN`], 64 bytes) when
/// [`Self::dc_key`] is `None`, so builds that know only version 1 read it,
/// and a version-2 message ([`MSG_LEN_V2`], 72 bytes) when it is `Some`
/// (a DC target, [`Self::dc_target`]); [`Self::decode`] and the exchanges
/// ([`swap`], [`serve`], [`Listener::accept`], [`connect`] and their async
/// forms) read either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnInfo {
    /// This side's QPN, LID, GID, active MTU and RoCE flag (bytes 12..16, 20..40).
    /// For a DC target ([`Self::dc_key`] `Some`), `endpoint.qpn` is its DCT
    /// number (DCT numbers live in QPN space).
    pub endpoint: Endpoint,
    /// First PSN this side sends (the peer's `rq_psn`).
    pub psn: u32,
    /// The buffer this side offers for RDMA.
    pub rkey: Rkey,
    /// The buffer's virtual address (bytes 48..56).
    pub addr: u64,
    /// The buffer's length in bytes (bytes 56..64).
    pub len: u64,
    /// The qkey a datagram to this side's UD QP must carry (IB spec
    /// 10.2.5); 0 when the QP is RC or UC. Bytes 44..48, big-endian: the
    /// field was reserved and sent as 0 before, so the layout's
    /// version (1) did not change for it.
    pub qkey: u32,
    /// `Some(key)`: this side is a DC (dynamically connected) target,
    /// `endpoint.qpn` its DCT number and `key` its 64-bit DC access key,
    /// which a DC initiator's sends to it must carry. Sent as a version-2
    /// message: the key big-endian at bytes 64..72, flag bit 1 of byte 23
    /// set. `None` (not a DC target): a version-1 message, 64 bytes.
    pub dc_key: Option<u64>,
}

impl ConnInfo {
    /// What this side tells the peer of `qp`: its endpoint
    /// ([`Qp::endpoint`]) and `psn`, the first PSN it will send (24 bits);
    /// no buffer offered ([`Self::offering`] adds one) and qkey 0 (set
    /// `qkey` for a UD QP).
    pub fn of(qp: &Qp, psn: u32) -> ConnInfo {
        ConnInfo {
            endpoint: qp.endpoint(),
            psn,
            rkey: Rkey(0),
            addr: 0,
            len: 0,
            qkey: 0,
            dc_key: None,
        }
    }

    /// The same, offering `mr` for the peer's RDMA: its rkey, address and
    /// length in bytes.
    pub fn offering(self, mr: &Mr) -> ConnInfo {
        ConnInfo {
            rkey: mr.rkey(),
            addr: mr.addr(),
            len: mr.len() as u64,
            ..self
        }
    }

    /// The same, as a DC target: `endpoint.qpn` becomes `dctn`, its DCT
    /// number, and [`Self::dc_key`] `Some(dc_key)`, its DC access key; the
    /// message becomes version 2 (72 bytes, the key big-endian at bytes
    /// 64..72, flag bit 1 of byte 23). The other fields are kept (a DC
    /// target offering a buffer calls [`Self::offering`] too).
    ///
    /// Errors: [`Error::Config`] when `dctn` is 0 or over 24 bits
    /// (`1..=0xffffff`); nothing is built.
    pub fn dc_target(self, dctn: u32, dc_key: u64) -> Result<ConnInfo> {
        if dctn == 0 || dctn > 0xff_ffff {
            return Err(Error::Config {
                field: "DCT number (24 bits)",
                value: dctn as u64,
                min: 1,
                max: 0xff_ffff,
            });
        }
        Ok(ConnInfo {
            endpoint: Endpoint {
                qpn: dctn,
                ..self.endpoint
            },
            dc_key: Some(dc_key),
            ..self
        })
    }

    /// What the DC target `dct` tells its initiators: [`Self::of`] (PSN 0:
    /// a DCT sends nothing) as [`Self::dc_target`] with its DCT number and
    /// [`QpConfig::dc_key`](crate::QpConfig::dc_key). Peers connect
    /// nothing to it: their DCIs address it per WR
    /// ([`DcDest`](crate::DcDest)).
    ///
    /// Errors: `dct` is not a DCT ([`Error::WrongTransport`]); it is not
    /// in RTR ([`Error::QpState`]: a DCT's number exists only from RTR,
    /// and one published before would be 0: sideway `aef191d`).
    pub fn of_dct(dct: &Qp) -> Result<ConnInfo> {
        if dct.config().qp_type != crate::QpType::Dct {
            return Err(Error::WrongTransport {
                qp_type: dct.config().qp_type,
                op: "ConnInfo::of_dct (it publishes a DCT)",
            });
        }
        let Some(n) = dct.dct_number() else {
            return Err(Error::QpState {
                state: dct.state(),
                needs: "RTR: a DCT's number exists only from RTR (Qp::ready_dct)",
            });
        };
        ConnInfo::of(dct, 0).dc_target(n, dct.config().dc_key)
    }

    /// The message: version 1, [`MSG_LEN`] (64) bytes, when
    /// [`Self::dc_key`] is `None`; version 2, [`MSG_LEN_V2`] (72) bytes,
    /// when it is `Some` (layout in the [module docs](self)).
    pub fn encode(&self) -> Vec<u8> {
        let e = &self.endpoint;
        let mut m = vec![0u8; MSG_LEN];
        let version: u16 = if self.dc_key.is_some() { 2 } else { 1 };
        m[0..8].copy_from_slice(&MAGIC);
        m[8..10].copy_from_slice(&version.to_be_bytes());
        m[12..16].copy_from_slice(&e.qpn.to_be_bytes());
        m[16..20].copy_from_slice(&self.psn.to_be_bytes());
        m[20..22].copy_from_slice(&e.lid.to_be_bytes());
        m[22] = e.active_mtu as u8;
        m[23] = if e.roce { FLAG_ROCE } else { 0 };
        m[24..40].copy_from_slice(&e.gid);
        m[40..44].copy_from_slice(&self.rkey.0.to_be_bytes());
        m[44..48].copy_from_slice(&self.qkey.to_be_bytes());
        m[48..56].copy_from_slice(&self.addr.to_be_bytes());
        m[56..64].copy_from_slice(&self.len.to_be_bytes());
        if let Some(key) = self.dc_key {
            m[23] |= FLAG_DC;
            m.extend_from_slice(&key.to_be_bytes());
        }
        m
    }

    /// Parses a whole message: version 1 ([`MSG_LEN`] bytes) or 2
    /// ([`MSG_LEN_V2`]). A `&[u8; MSG_LEN]` (what this took before version
    /// 2) still fits.
    ///
    /// Errors ([`Error::Exchange`]): wrong magic or version; a length
    /// other than the version's (a message cut short, or bytes after it);
    /// the DC-target flag (bit 1 of byte 23) in a version-1 message or
    /// missing from a version-2 one; a QPN or PSN over 24 bits, a DCT
    /// number of 0; an MTU code over 5.
    pub fn decode(m: &[u8]) -> Result<ConnInfo> {
        if m.len() < 10 || m[0..8] != MAGIC {
            return Err(Error::Exchange(
                "the peer's message does not start with \"rdmadir\\0\" (is it another program, or perftest?)"
                    .into(),
            ));
        }
        let version = u16::from_be_bytes([m[8], m[9]]);
        let want = match version {
            1 => MSG_LEN,
            2 => MSG_LEN_V2,
            _ => {
                return Err(Error::Exchange(format!(
                    "the peer speaks exchange version {version}; this build speaks 1 and {VERSION}"
                )))
            }
        };
        if m.len() != want {
            return Err(Error::Exchange(format!(
                "the peer's version-{version} message is {} bytes; it must be {want}",
                m.len()
            )));
        }
        let dc = m[23] & FLAG_DC != 0;
        if dc != (version == 2) {
            return Err(Error::Exchange(format!(
                "the peer's version-{version} message {} the DC-target flag (byte 23, bit 1): {}",
                if dc { "has" } else { "lacks" },
                if dc {
                    "a DC target's message is version 2"
                } else {
                    "version 2 is a DC target's message"
                }
            )));
        }
        let u32_at = |o: usize| u32::from_be_bytes(m[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_be_bytes(m[o..o + 8].try_into().unwrap());
        let (qpn, psn) = (u32_at(12), u32_at(16));
        if qpn > 0xff_ffff || psn > 0xff_ffff {
            return Err(Error::Exchange(format!(
                "QPN {qpn:#x} or PSN {psn:#x} is over 24 bits"
            )));
        }
        if dc && qpn == 0 {
            return Err(Error::Exchange(
                "the peer's DC target has DCT number 0".into(),
            ));
        }
        if m[22] > 5 {
            return Err(Error::Exchange(format!("MTU code {} is over 5", m[22])));
        }
        Ok(ConnInfo {
            endpoint: Endpoint {
                qpn,
                lid: u16::from_be_bytes([m[20], m[21]]),
                gid: m[24..40].try_into().unwrap(),
                gid_index: None,
                active_mtu: m[22] as u32,
                roce: m[23] & FLAG_ROCE != 0,
            },
            psn,
            rkey: Rkey(u32_at(40)),
            addr: u64_at(48),
            len: u64_at(56),
            qkey: u32_at(44),
            dc_key: dc.then(|| u64_at(64)),
        })
    }
}

/// How long the message whose first [`MSG_LEN`] bytes are `head` is: 72
/// when they are ours and say version 2, else 64 (and [`ConnInfo::decode`]
/// says what is wrong, if anything).
fn wire_len(head: &[u8; MSG_LEN]) -> usize {
    if head[0..8] == MAGIC && head[8..10] == 2u16.to_be_bytes() {
        MSG_LEN_V2
    } else {
        MSG_LEN
    }
}

fn io(what: &str, e: std::io::Error) -> Error {
    Error::Exchange(format!("{what}: {e}"))
}

/// Sends `mine`, then reads the peer's message, on a connection [`serve`]
/// or [`connect`] made: one more exchange, e.g. for a second QP of the same
/// run. Each message is [`MSG_LEN`] bytes, or [`MSG_LEN_V2`] for a DC
/// target's (see [`ConnInfo::encode`]); either side may send either: the
/// first 64 bytes are read, then 8 more when their version is 2.
/// The stream is left with a 60 s read timeout (whatever it had before):
/// what a later blocking [`barrier`] or [`swap_line`] on it meets.
///
/// Errors: [`Error::Exchange`] when the socket fails, the peer closes the
/// connection or sends nothing within 60 s; the decoding's errors.
pub fn swap(s: &mut TcpStream, mine: &ConnInfo) -> Result<ConnInfo> {
    block_on(swap_in(s, mine, &mut Blocking))
}

/// [`swap`] as a future, on any runtime: the socket is made non-blocking
/// for the exchange (and blocking again after it) and watched by a
/// [`Reactor`](crate::Reactor); the 60 s limit is a `timerfd` beside it.
/// Dropped before it resolves, part of a message may have been sent or
/// read: close the connection.
///
/// Errors: as [`swap`]; [`Error::Reactor`].
pub async fn swap_async(s: &mut TcpStream, mine: &ConnInfo) -> Result<ConnInfo> {
    swap_in(s, mine, &mut Awaited::default()).await
}

/// The stream made non-blocking (for reads and writes through an
/// [`FdWait`]), blocking again when dropped.
struct NonBlocking<'s>(&'s mut TcpStream, u64);

impl<'s> NonBlocking<'s> {
    fn new(s: &'s mut TcpStream) -> Result<Self> {
        s.set_nonblocking(true).map_err(|e| io("socket", e))?;
        Ok(NonBlocking(s, next_serial()))
    }
}

impl NonBlocking<'_> {
    /// Writes all of `buf`, waiting through `w` while the socket is full;
    /// `TimedOut` at `deadline`.
    async fn write_full<W: FdWait>(
        &self,
        buf: &[u8],
        w: &mut W,
        deadline: Instant,
    ) -> std::io::Result<()> {
        let mut sent = 0;
        while sent < buf.len() {
            match (&*self.0).write(&buf[sent..]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.wait(w, true, deadline).await?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fills `buf`, waiting through `w` while nothing came; how many bytes
    /// came, and `UnexpectedEof` if the peer closed first, `TimedOut` at
    /// `deadline`.
    async fn read_full<W: FdWait>(
        &self,
        buf: &mut [u8],
        w: &mut W,
        deadline: Instant,
    ) -> (usize, std::io::Result<()>) {
        let mut got = 0;
        while got < buf.len() {
            match (&*self.0).read(&mut buf[got..]) {
                Ok(0) => return (got, Err(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if let Err(e) = self.wait(w, false, deadline).await {
                        return (got, Err(e));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return (got, Err(e)),
            }
        }
        (got, Ok(()))
    }

    async fn wait<W: FdWait>(
        &self,
        w: &mut W,
        write: bool,
        deadline: Instant,
    ) -> std::io::Result<()> {
        match w
            .ready(self.1, self.0.as_fd(), write, deadline, "TCP socket")
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => Err(std::io::ErrorKind::TimedOut.into()),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}

impl Drop for NonBlocking<'_> {
    fn drop(&mut self) {
        let _ = self.0.set_nonblocking(false);
    }
}

async fn swap_in<W: FdWait>(s: &mut TcpStream, mine: &ConnInfo, w: &mut W) -> Result<ConnInfo> {
    let deadline = Instant::now() + Duration::from_secs(60);
    // What a blocking reader of the stream meets later (`barrier`,
    // `swap_line`): the same 60 s.
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .map_err(|e| io("socket", e))?;
    let s = NonBlocking::new(s)?;
    if let Err(e) = s.write_full(&mine.encode(), w, deadline).await {
        return Err(match e.kind() {
            std::io::ErrorKind::TimedOut => {
                Error::Exchange("the peer took none of our connection facts within 60 s".into())
            }
            _ => io("sending our connection facts", e),
        });
    }
    let mut m = [0u8; MSG_LEN_V2];
    let (mut got, mut r) = s.read_full(&mut m[..MSG_LEN], w, deadline).await;
    let mut want = MSG_LEN;
    if r.is_ok() {
        want = wire_len(m[..MSG_LEN].try_into().unwrap());
        if want > MSG_LEN {
            let (more, r2) = s.read_full(&mut m[MSG_LEN..want], w, deadline).await;
            got += more;
            r = r2;
        }
    }
    if let Err(e) = r {
        return Err(match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::Exchange(format!(
                "the peer closed the connection after {got} of {want} bytes of its connection facts"
            )),
            std::io::ErrorKind::TimedOut => Error::Exchange(format!(
                "no connection facts from the peer within 60 s ({got} of {want} bytes came)"
            )),
            _ => io("reading the peer's connection facts", e),
        });
    }
    ConnInfo::decode(&m[..want])
}

/// Server side: waits on `port` (all addresses) for one client, then swaps
/// messages. Returns the peer's facts and the connection (kept open by the
/// caller for a closing handshake). [`Listener::bind`] then
/// [`Listener::accept`]; a server that takes more than one client, or that
/// says it waits, binds first with [`Listener::bind`] and keeps it.
///
/// Errors: those of [`Listener::bind`] and [`Listener::accept`].
pub fn serve(port: u16, mine: &ConnInfo) -> Result<(ConnInfo, TcpStream)> {
    Listener::bind(port)?.accept(mine)
}

/// [`serve`] as a future ([`Listener::accept_async`]).
///
/// Errors: as [`serve`]; [`Error::Reactor`].
pub async fn serve_async(port: u16, mine: &ConnInfo) -> Result<(ConnInfo, TcpStream)> {
    Listener::bind(port)?.accept_async(mine).await
}

/// A server's listening TCP socket (all IPv4 addresses), bound before the
/// server says it waits, so that a port in use is an error at once, and
/// kept across the clients it takes (no window in which the port is free).
/// Its socket is non-blocking: [`Self::accept`] waits in `poll(2)`,
/// [`Self::accept_async`] through a reactor, and two of either may wait at
/// once (each connection goes to one of them).
#[derive(Debug)]
pub struct Listener {
    l: TcpListener,
    port: u16,
    serial: u64,
}

impl Listener {
    /// Listens on TCP `port` on all IPv4 addresses; port 0 takes one the
    /// system picks ([`Self::port`] says which).
    ///
    /// Errors: [`Error::Invalid`] for a port in use
    /// (`TCP port N is in use`, EADDRINUSE) or one this process may not
    /// bind (EACCES: below 1024 without privileges); [`Error::Exchange`]
    /// for any other socket failure.
    pub fn bind(port: u16) -> Result<Listener> {
        let l = TcpListener::bind(("0.0.0.0", port)).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => Error::Invalid(format!("TCP port {port} is in use")),
            std::io::ErrorKind::PermissionDenied => {
                Error::Invalid(format!("TCP port {port} may not be bound here: {e}"))
            }
            _ => io(&format!("listen on TCP port {port}"), e),
        })?;
        l.set_nonblocking(true)
            .map_err(|e| io("listening socket", e))?;
        // Port 0: the one the system picked.
        let port = l
            .local_addr()
            .map_err(|e| io("listening socket", e))?
            .port();
        Ok(Listener {
            l,
            port,
            serial: next_serial(),
        })
    }

    /// The TCP port listened on (the system's pick after a bind of port 0).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits (without a limit) for one client, then swaps messages as
    /// [`serve`] does. Returns the peer's facts and the connection.
    ///
    /// Errors: [`Error::Exchange`] when accepting fails; those of [`swap`].
    pub fn accept(&self, mine: &ConnInfo) -> Result<(ConnInfo, TcpStream)> {
        block_on(self.accept_in(mine, &mut Blocking))
    }

    /// [`Self::accept`] as a future, on any runtime (the listening socket
    /// watched by a [`Reactor`](crate::Reactor), then [`swap_async`]).
    /// Cancel-safe until a client is taken; dropped after, it closes that
    /// connection.
    ///
    /// Errors: as [`Self::accept`]; [`Error::Reactor`].
    pub async fn accept_async(&self, mine: &ConnInfo) -> Result<(ConnInfo, TcpStream)> {
        self.accept_in(mine, &mut Awaited::default()).await
    }

    async fn accept_in<W: FdWait>(
        &self,
        mine: &ConnInfo,
        w: &mut W,
    ) -> Result<(ConnInfo, TcpStream)> {
        // No limit: a deadline a year away.
        let forever = deadline_after(Duration::MAX);
        let mut s = loop {
            match self.l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    w.ready(self.serial, self.l.as_fd(), false, forever, "TCP listener")
                        .await?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io("accept", e)),
            }
        };
        // Accepted sockets do not inherit the listener's O_NONBLOCK on
        // Linux; said again for other systems.
        s.set_nonblocking(false).map_err(|e| io("socket", e))?;
        let peer = swap_in(&mut s, mine, w).await?;
        Ok((peer, s))
    }
}

/// Client side: connects to `host:port`, retrying until `wait` has passed
/// (the server may not be listening yet), then swaps messages. A host name
/// that does not resolve, is [`Error::Invalid`], port 0 [`Error::Config`], at once.
pub fn connect(
    host: &str,
    port: u16,
    wait: Duration,
    mine: &ConnInfo,
) -> Result<(ConnInfo, TcpStream)> {
    block_on(connect_in(host, port, wait, mine, &mut Blocking))
}

/// [`connect`] as a future, on any runtime: a non-blocking connect watched
/// by a [`Reactor`](crate::Reactor) for writability, the 50 ms between
/// tries and the `wait` limit by a `timerfd`, then [`swap_async`]. `host`
/// is resolved by the system's blocking resolver (an IP address is parsed
/// at once). Dropped before it resolves, the connection being made is
/// closed.
///
/// Errors: as [`connect`]; [`Error::Reactor`].
pub async fn connect_async(
    host: &str,
    port: u16,
    wait: Duration,
    mine: &ConnInfo,
) -> Result<(ConnInfo, TcpStream)> {
    connect_in(host, port, wait, mine, &mut Awaited::default()).await
}

async fn connect_in<W: FdWait>(
    host: &str,
    port: u16,
    wait: Duration,
    mine: &ConnInfo,
    w: &mut W,
) -> Result<(ConnInfo, TcpStream)> {
    // A name that does not resolve, or port 0, is an argument error, not
    // something to wait out (the server not listening yet is).
    if port == 0 {
        return Err(Error::Config {
            field: "TCP port (name the server's port; 0 cannot be connected to)",
            value: 0,
            min: 1,
            max: u16::MAX as u64,
        });
    }
    use std::net::ToSocketAddrs;
    let addrs: Vec<std::net::SocketAddr> = match (host, port).to_socket_addrs() {
        Ok(a) => a.collect(),
        Err(e) => {
            return Err(Error::Invalid(format!(
                "host {host:?} does not resolve: {e}"
            )))
        }
    };
    if addrs.is_empty() {
        return Err(Error::Invalid(format!("host {host:?} has no address")));
    }
    // A wait too long to add to now means: no deadline (a year).
    let deadline = deadline_after(wait);
    let mut s = 'tries: loop {
        let mut last = None;
        for a in &addrs {
            match connect_one(a, deadline, w).await {
                Ok(s) => break 'tries s,
                Err(e) => last = Some(e),
            }
        }
        let e = last.expect("at least one address");
        if Instant::now() >= deadline {
            return Err(io(
                &format!("connect to {host}:{port} (waited {wait:?})"),
                e,
            ));
        }
        w.pause(Duration::from_millis(50)).await?;
    };
    let peer = swap_in(&mut s, mine, w).await?;
    Ok((peer, s))
}

/// One non-blocking connect to `addr`, waited for (writable) until
/// `deadline`; the stream is left blocking.
async fn connect_one<W: FdWait>(
    addr: &std::net::SocketAddr,
    deadline: Instant,
    w: &mut W,
) -> std::io::Result<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::for_address(*addr), Type::STREAM, None)?;
    sock.set_nonblocking(true)?;
    match sock.connect(&(*addr).into()) {
        Ok(()) => {}
        Err(e)
            if e.raw_os_error() == Some(libc::EINPROGRESS)
                || e.kind() == std::io::ErrorKind::WouldBlock =>
        {
            let ready = w
                .ready(next_serial(), sock.as_fd(), true, deadline, "TCP socket")
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            if !ready {
                return Err(std::io::ErrorKind::TimedOut.into());
            }
            if let Some(e) = sock.take_error()? {
                return Err(e);
            }
        }
        Err(e) => return Err(e),
    }
    sock.set_nonblocking(false)?;
    Ok(sock.into())
}

/// Connects `qp` (an RC or UC QP in RESET) to the peer whose facts came
/// back from the exchange: [`Qp::connect_remote`] with the two PSNs in
/// their places (`qp` sends from `mine.psn` and expects `peer.psn`).
///
/// Errors: `mine` is not `qp`'s (its QPN differs: [`Error::Invalid`],
/// nothing changes); `peer` is a DC target ([`ConnInfo::dc_key`] `Some`:
/// an RC or UC QP does not connect to a DCT; [`Error::Invalid`], nothing
/// changes); those of [`Qp::connect_remote`].
pub fn connect_qp(qp: &mut Qp, mine: &ConnInfo, peer: &ConnInfo) -> Result<()> {
    if peer.dc_key.is_some() {
        return Err(Error::Invalid(format!(
            "the peer is a DC target (DCT {:#x}): an RC or UC QP does not connect to it",
            peer.endpoint.qpn
        )));
    }
    if mine.endpoint.qpn != qp.qp_num() {
        return Err(Error::Invalid(format!(
            "these connection facts are QP {:#x}'s, not QP {:#x}'s",
            mine.endpoint.qpn,
            qp.qp_num()
        )));
    }
    qp.connect_remote(mine.psn, &peer.endpoint, peer.psn)
}

/// Sends `line` (no newline in it) and reads the peer's line, byte by byte
/// so nothing after it is taken from the stream; at most 256 bytes.
/// Both sides call it: used to check that they agree on what they run
/// (the examples' simple rendezvous, with [`barrier`]).
///
/// Errors: [`Error::Exchange`] when the peer left or its line is over 256
/// bytes.
pub fn swap_line(s: &mut TcpStream, line: &str) -> Result<String> {
    let closed = |e: std::io::Error| Error::Exchange(format!("the peer left: {e}"));
    s.write_all(format!("{line}\n").as_bytes())
        .map_err(closed)?;
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    loop {
        s.read_exact(&mut b).map_err(closed)?;
        if b[0] == b'\n' {
            break;
        }
        if got.len() == 256 {
            return Err(Error::Exchange("the peer's line is over 256 bytes".into()));
        }
        got.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

/// [`barrier`] as a future, on any runtime (the socket made non-blocking
/// for it, watched by a [`Reactor`](crate::Reactor)). It waits without a
/// limit: put it under the runtime's timeout if the peer may hang.
///
/// Errors: as [`barrier`]; [`Error::Reactor`].
pub async fn barrier_async(s: &mut TcpStream) -> Result<()> {
    let closed = |e: std::io::Error| {
        Error::Exchange(format!(
            "the peer left before the run ended ({e}): see its own output for why"
        ))
    };
    let forever = deadline_after(Duration::MAX);
    let mut w = Awaited::default();
    let s = NonBlocking::new(s)?;
    s.write_full(&[1], &mut w, forever).await.map_err(closed)?;
    let mut b = [0u8; 1];
    s.read_full(&mut b, &mut w, forever).await.1.map_err(closed)
}

/// A closing handshake: each side sends one byte and waits for the peer's,
/// so neither tears its QP down while the other still uses it. With
/// [`swap_line`], the examples' simple rendezvous over the exchange's TCP
/// stream.
///
/// Errors: [`Error::Exchange`] when the peer closed the stream or the read
/// failed (the peer's own output says why; two sides that ran different
/// amounts of work end apart, and a program says which of its settings
/// must agree).
pub fn barrier(s: &mut TcpStream) -> Result<()> {
    let closed = |e: std::io::Error| {
        Error::Exchange(format!(
            "the peer left before the run ended ({e}): see its own output for why"
        ))
    };
    s.write_all(&[1]).map_err(closed)?;
    let mut b = [0u8; 1];
    s.read_exact(&mut b).map_err(closed)?;
    Ok(())
}

#[cfg(test)]
#[path = "exchange_tests.rs"]
mod tests;
