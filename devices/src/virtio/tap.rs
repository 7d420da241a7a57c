//! Host TAP devices for virtio-net, through `/dev/net/tun`.
//!
//! The TAP carries a 12-byte virtio-net header in front of every frame
//! (`IFF_VNET_HDR`, `TUNSETVNETHDRSZ`), the same header a virtio 1.x guest
//! uses, so frames pass between the queues and the TAP without
//! reformatting. A TAP opens with no offloads (`TUNSETOFFLOAD 0`: whole,
//! checksummed frames, which any guest takes); the NIC's device threads
//! turn on what its driver negotiated ([`set_offload`]). The host side of the link is configured as
//! Cloud Hypervisor does it: address, netmask, MAC, MTU and `IFF_UP`
//! through ioctls on an `AF_INET` socket.
//!
//! A multiqueue NIC opens the TAP once per queue pair with
//! `IFF_MULTI_QUEUE` (the kernel spreads flows over the attached
//! descriptors); [`TapQueues`] attaches only the pairs the driver uses.

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::{Arc, Mutex};

/// Size of the virtio-net header on the TAP (virtio 1.x `virtio_net_hdr`
/// with `num_buffers`).
pub const VNET_HDR_LEN: usize = 12;

/// Name pattern for TAPs the kernel names (`%d` becomes a free number).
const DEFAULT_NAME: &str = "vmtap%d";

/// An open TAP device.
#[derive(Debug)]
pub struct Tap {
    file: File,
    name: String,
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("'{name}' is not a valid interface name"),
        ));
    }
    // SAFETY: ifreq is plain old data (a name and a union of integers,
    // sockaddrs and a pointer); all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    Ok(ifr)
}

fn with_context(e: io::Error, what: &str, name: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what} on {name}: {e}"))
}

/// `ioctl(fd, req, arg)` with errno turned into an io::Error.
///
/// # Safety
/// `arg` must be what `req` expects (a pointer to a live object of the
/// right type, or an integer).
unsafe fn ioctl<T>(fd: RawFd, req: libc::c_ulong, arg: T) -> io::Result<()> {
    // SAFETY: the caller guarantees `arg` matches `req`.
    if unsafe { libc::ioctl(fd, req as _, arg) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn sockaddr_in(ip: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: sockaddr_in and sockaddr are both 16 bytes of plain data;
    // the kernel reads this sockaddr as a sockaddr_in (sa_family AF_INET).
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

impl Tap {
    /// Opens TAP `name`, creating it if it does not exist (a missing name
    /// lets the kernel pick `vmtapN`). The file is non-blocking.
    pub fn open(name: Option<&str>) -> io::Result<Self> {
        Self::open_with(name.unwrap_or(DEFAULT_NAME), 0)
    }

    /// Opens TAP `name` (created if missing, `vmtapN` when None) with
    /// `queues` descriptors (`IFF_MULTI_QUEUE` when more than one): the
    /// TAP for the first and the files of the others, in queue order.
    pub fn open_queues(name: Option<&str>, queues: usize) -> io::Result<(Self, Vec<File>)> {
        if queues <= 1 {
            return Ok((Self::open(name)?, Vec::new()));
        }
        let multi = libc::IFF_MULTI_QUEUE;
        let first = Self::open_with(name.unwrap_or(DEFAULT_NAME), multi)?;
        // The others by the name the kernel gave the first.
        let others = (1..queues)
            .map(|_| Self::open_with(&first.name, multi).map(Self::into_file))
            .collect::<io::Result<Vec<_>>>()?;
        Ok((first, others))
    }

    fn open_with(name: &str, extra_flags: libc::c_int) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("opening /dev/net/tun: {e}")))?;
        let mut ifr = ifreq_for(name)?;
        ifr.ifr_ifru.ifru_flags =
            (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR | extra_flags) as _;
        // SAFETY: TUNSETIFF takes a pointer to an ifreq, which lives across the call.
        unsafe { ioctl(file.as_raw_fd(), libc::TUNSETIFF as _, &mut ifr as *mut _) }
            .map_err(|e| with_context(e, "TUNSETIFF", name))?;
        // SAFETY: the kernel NUL-terminates the name it returns (IFNAMSIZ bytes).
        let actual = unsafe { CStr::from_ptr(ifr.ifr_name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let hdr_len = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ takes a pointer to an int.
        unsafe {
            ioctl(
                file.as_raw_fd(),
                libc::TUNSETVNETHDRSZ as _,
                &hdr_len as *const _,
            )
        }
        .map_err(|e| with_context(e, "TUNSETVNETHDRSZ", &actual))?;
        // SAFETY: TUNSETOFFLOAD takes the offload flags as an integer.
        unsafe {
            ioctl(
                file.as_raw_fd(),
                libc::TUNSETOFFLOAD as _,
                0 as libc::c_ulong,
            )
        }
        .map_err(|e| with_context(e, "TUNSETOFFLOAD", &actual))?;
        Ok(Self { file, name: actual })
    }

    /// The interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The TAP's file (one frame per read or write, each behind a
    /// [`VNET_HDR_LEN`]-byte header).
    pub fn into_file(self) -> File {
        self.file
    }

    fn control_socket() -> io::Result<OwnedFd> {
        // SAFETY: plain socket(2) call; the result is checked below.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn sock_ioctl(&self, req: libc::c_ulong, what: &str, ifr: &mut libc::ifreq) -> io::Result<()> {
        let sock = Self::control_socket()?;
        // SAFETY: every request used here takes a pointer to an ifreq.
        unsafe { ioctl(sock.as_raw_fd(), req, ifr as *mut _) }
            .map_err(|e| with_context(e, what, &self.name))
    }

    /// Sets the host-side IPv4 address and netmask.
    pub fn set_ipv4(&self, ip: Ipv4Addr, mask: Ipv4Addr) -> io::Result<()> {
        let mut ifr = ifreq_for(&self.name)?;
        ifr.ifr_ifru.ifru_addr = sockaddr_in(ip);
        self.sock_ioctl(libc::SIOCSIFADDR as _, "SIOCSIFADDR", &mut ifr)?;
        let mut ifr = ifreq_for(&self.name)?;
        ifr.ifr_ifru.ifru_netmask = sockaddr_in(mask);
        self.sock_ioctl(libc::SIOCSIFNETMASK as _, "SIOCSIFNETMASK", &mut ifr)
    }

    /// Sets the host-side MAC address.
    pub fn set_mac(&self, mac: [u8; 6]) -> io::Result<()> {
        let mut ifr = ifreq_for(&self.name)?;
        // SAFETY: all-zero is a valid sockaddr.
        let mut sa: libc::sockaddr = unsafe { std::mem::zeroed() };
        sa.sa_family = libc::ARPHRD_ETHER;
        for (dst, src) in sa.sa_data.iter_mut().zip(mac) {
            *dst = src as libc::c_char;
        }
        ifr.ifr_ifru.ifru_hwaddr = sa;
        self.sock_ioctl(libc::SIOCSIFHWADDR as _, "SIOCSIFHWADDR", &mut ifr)
    }

    /// Sets the MTU.
    pub fn set_mtu(&self, mtu: u16) -> io::Result<()> {
        let mut ifr = ifreq_for(&self.name)?;
        ifr.ifr_ifru.ifru_mtu = libc::c_int::from(mtu);
        self.sock_ioctl(libc::SIOCSIFMTU as _, "SIOCSIFMTU", &mut ifr)
    }

    /// Brings the link up.
    pub fn up(&self) -> io::Result<()> {
        let mut ifr = ifreq_for(&self.name)?;
        self.sock_ioctl(libc::SIOCGIFFLAGS as _, "SIOCGIFFLAGS", &mut ifr)?;
        // SAFETY: SIOCGIFFLAGS filled in the flags member of the union.
        let flags = unsafe { ifr.ifr_ifru.ifru_flags };
        ifr.ifr_ifru.ifru_flags = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        self.sock_ioctl(libc::SIOCSIFFLAGS as _, "SIOCSIFFLAGS", &mut ifr)
    }
}

/// Tells the TAP behind `file` which offloads the guest takes
/// (`TUNSETOFFLOAD` flags: partial checksums, TSO), i.e. what it may hand
/// over in the header in front of each frame. The flags are the TAP
/// device's, whichever of its queue descriptors sets them.
pub fn set_offload(file: &File, flags: u32) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes the offload flags as an integer.
    unsafe {
        ioctl(
            file.as_raw_fd(),
            libc::TUNSETOFFLOAD as _,
            libc::c_ulong::from(flags),
        )
    }
}

/// The descriptors of a (multiqueue) TAP, one per queue pair, and which
/// of them the kernel may steer frames to. Only the NIC's control path
/// changes it (`VIRTIO_NET_CTRL_MQ_VQ_PAIRS_SET`), never the I/O path.
#[derive(Debug)]
pub struct TapQueues {
    files: Vec<Arc<File>>,
    /// Whether `TUNSETQUEUE` applies (a TAP opened with `IFF_MULTI_QUEUE`).
    multi_queue: bool,
    attached: Mutex<Vec<bool>>,
}

impl TapQueues {
    /// `files` in queue order, all attached (as `TUNSETIFF` leaves them).
    /// Without `multi_queue` the attachment is only recorded (a plain TAP
    /// or a test double).
    pub fn new(files: Vec<File>, multi_queue: bool) -> Self {
        let n = files.len();
        Self {
            files: files.into_iter().map(Arc::new).collect(),
            multi_queue,
            attached: Mutex::new(vec![true; n]),
        }
    }

    /// How many descriptors (queue pairs) there are.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Queue `i`'s descriptor.
    pub fn file(&self, i: usize) -> Option<Arc<File>> {
        self.files.get(i).cloned()
    }

    /// How many queues are attached.
    pub fn attached(&self) -> usize {
        let a = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        a.iter().filter(|&&x| x).count()
    }

    /// Attaches queues `0..n` and detaches the others, so the kernel
    /// steers frames only to pairs the guest serves.
    pub fn enable(&self, n: usize) -> io::Result<()> {
        let mut attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        // Attach first: a TAP must keep one queue attached.
        let order = (0..self.files.len()).map(|i| (i, i < n));
        let (on, off): (Vec<_>, Vec<_>) = order.partition(|&(_, want)| want);
        for (i, want) in on.into_iter().chain(off) {
            if attached[i] == want {
                continue;
            }
            if self.multi_queue {
                set_queue(&self.files[i], want)?;
            }
            attached[i] = want;
        }
        Ok(())
    }
}

/// `TUNSETQUEUE`: attach or detach one descriptor of a multiqueue TAP.
fn set_queue(file: &File, attach: bool) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; all-zero is valid (the name is
    // ignored by TUNSETQUEUE).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    ifr.ifr_ifru.ifru_flags = if attach {
        libc::IFF_ATTACH_QUEUE
    } else {
        libc::IFF_DETACH_QUEUE
    } as _;
    // SAFETY: TUNSETQUEUE takes a pointer to an ifreq, live across the call.
    unsafe { ioctl(file.as_raw_fd(), libc::TUNSETQUEUE as _, &mut ifr as *mut _) }.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "TUNSETQUEUE {}: {e}",
                if attach { "attach" } else { "detach" }
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_enable_keeps_the_first_attached_and_records_state() {
        let files = (0..4)
            .map(|_| File::open("/dev/null").unwrap())
            .collect::<Vec<_>>();
        let q = TapQueues::new(files, false);
        assert_eq!((q.len(), q.attached()), (4, 4));
        q.enable(1).unwrap();
        assert_eq!(q.attached(), 1);
        q.enable(3).unwrap();
        assert_eq!(q.attached(), 3);
        q.enable(3).unwrap();
        assert_eq!(q.attached(), 3);
        assert!(q.file(3).is_some() && q.file(4).is_none());
    }

    /// Needs CAP_NET_ADMIN: `cargo test -p devices -- --ignored multi_queue_tap`.
    #[test]
    #[ignore]
    fn multi_queue_tap_attaches_and_detaches() {
        let (tap, others) = Tap::open_queues(Some("chmq%d"), 3).expect("TUNSETIFF");
        let mut files = vec![tap.into_file()];
        files.extend(others);
        let q = TapQueues::new(files, true);
        q.enable(1).unwrap();
        q.enable(3).unwrap();
        q.enable(2).unwrap();
        assert_eq!(q.attached(), 2);
        // A detached queue is quiet: the kernel steers nothing to it.
        for i in 0..3 {
            let e = std::io::Read::read(&mut &*q.file(i).unwrap(), &mut [0u8; 64]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        }
    }

    #[test]
    fn interface_names_are_checked() {
        assert!(ifreq_for("").is_err());
        assert!(ifreq_for("0123456789abcdef").is_err());
        assert!(ifreq_for("a\0b").is_err());
        let ifr = ifreq_for("tap0").unwrap();
        assert_eq!(
            ifr.ifr_name[..5],
            [b't' as _, b'a' as _, b'p' as _, b'0' as _, 0]
        );
    }

    #[test]
    fn sockaddr_is_network_order() {
        let sa = sockaddr_in(Ipv4Addr::new(192, 168, 10, 10));
        assert_eq!(sa.sa_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(&sa.sa_data[2..6], &[192u8 as _, 168u8 as _, 10, 10]);
    }

    /// Needs CAP_NET_ADMIN and changes host networking while it runs:
    /// `cargo test -p devices -- --ignored tap_is_created`.
    #[test]
    #[ignore]
    fn tap_is_created_configured_and_removed() {
        let tap = Tap::open(Some("chtest%d")).expect("TUNSETIFF");
        let name = tap.name().to_owned();
        assert!(name.starts_with("chtest"), "{name}");
        tap.set_ipv4(
            Ipv4Addr::new(198, 51, 100, 1),
            Ipv4Addr::new(255, 255, 255, 0),
        )
        .unwrap();
        tap.set_mac([0x12, 0x34, 0x56, 0x78, 0x90, 0x02]).unwrap();
        tap.set_mtu(1400).unwrap();
        tap.up().unwrap();
        let sys = format!("/sys/class/net/{name}");
        let read = |f: &str| std::fs::read_to_string(format!("{sys}/{f}")).unwrap();
        assert_eq!(read("address").trim(), "12:34:56:78:90:02");
        assert_eq!(read("mtu").trim(), "1400");
        // The offloads a guest negotiates: checksums and TSO both ways
        // (TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6), then none again.
        let file = tap.into_file();
        set_offload(&file, 0x07).expect("TUNSETOFFLOAD csum+tso");
        set_offload(&file, 0).expect("TUNSETOFFLOAD none");
        drop(file);
        assert!(!std::path::Path::new(&sys).exists(), "tap left behind");
    }
}
