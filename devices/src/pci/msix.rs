//! MSI-X (PCI Local Bus 3.0 section 6.8.2): the vector table and pending
//! bit array a function exposes in a memory BAR, and delivery.
//!
//! Each vector has its own eventfd, registered by the VMM as a KVM irqfd on
//! a GSI of its own; the VMM's [`MsiRouting`] points that GSI at the
//! message the guest wrote in the table. A vector that is masked (per
//! vector or for the whole function) or held back (the VM is paused)
//! records its interrupt in the pending bit array and is delivered when it
//! is unmasked or released. This module never calls KVM.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use log::{debug, warn};
use vmm_sys_util::eventfd::EventFd;

/// Bytes per table entry: message address (64 bits), data, vector control.
pub const MSIX_ENTRY_SIZE: u64 = 16;
/// Vector control bit: the vector is masked.
const VECTOR_MASKED: u32 = 1;
/// Largest table a function may have (11-bit table size field).
pub const MSIX_MAX_VECTORS: usize = 2048;

/// An MSI message: what the function writes, where, to interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsiMessage {
    /// Message address (x86: 0xfeexxxxx, the destination APIC).
    pub address: u64,
    /// Message data (vector and delivery mode).
    pub data: u32,
}

/// How the VMM points a vector's GSI at a message (KVM's GSI routing).
pub trait MsiRouting: Send + Sync {
    /// Makes `gsi` deliver `msg`.
    fn route(&self, gsi: u32, msg: MsiMessage) -> io::Result<()>;
}

/// One vector's delivery path.
#[derive(Debug)]
pub struct MsixVector {
    /// The GSI the VMM registered `irq` on.
    pub gsi: u32,
    /// Written once per interrupt; a KVM irqfd.
    pub irq: EventFd,
}

#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    address: u64,
    data: u32,
    control: u32,
}

impl Entry {
    fn masked(&self) -> bool {
        self.control & VECTOR_MASKED != 0
    }
}

struct State {
    entries: Vec<Entry>,
    pending: Vec<bool>,
    /// What each vector's GSI was last routed to.
    routed: Vec<Option<MsiMessage>>,
    vectors: Vec<MsixVector>,
    enabled: bool,
    function_masked: bool,
    held: bool,
    signalled: u64,
}

/// A function's MSI-X table, pending bits and vectors. Shared between the
/// vCPUs (table and capability writes) and the device thread (signals).
pub struct Msix {
    state: Mutex<State>,
    router: Arc<dyn MsiRouting>,
}

impl std::fmt::Debug for Msix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Msix")
            .field("vectors", &self.table_size())
            .finish()
    }
}

impl Msix {
    /// A table with one entry per vector, every entry masked (the reset
    /// state), MSI-X disabled.
    pub fn new(vectors: Vec<MsixVector>, router: Arc<dyn MsiRouting>) -> Self {
        let n = vectors.len().min(MSIX_MAX_VECTORS);
        let mut vectors = vectors;
        vectors.truncate(n);
        Self {
            state: Mutex::new(State {
                entries: vec![
                    Entry {
                        control: VECTOR_MASKED,
                        ..Entry::default()
                    };
                    n
                ],
                pending: vec![false; n],
                routed: vec![None; n],
                vectors,
                enabled: false,
                function_masked: false,
                held: false,
                signalled: 0,
            }),
            router,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of vectors.
    pub fn table_size(&self) -> usize {
        self.lock().entries.len()
    }

    /// Size in bytes of the table.
    pub fn table_bytes(&self) -> u64 {
        self.table_size() as u64 * MSIX_ENTRY_SIZE
    }

    /// How many interrupts were delivered.
    pub fn signalled(&self) -> u64 {
        self.lock().signalled
    }

    /// The capability's Message Control enable and function-mask bits
    /// changed.
    pub fn set_control(&self, enabled: bool, function_masked: bool) {
        let mut s = self.lock();
        s.enabled = enabled;
        s.function_masked = function_masked;
        self.sync(&mut s);
    }

    /// Holds every interrupt back (recorded as pending).
    pub fn hold(&self) {
        self.lock().held = true;
    }

    /// Delivers what was held back and lets interrupts through again.
    pub fn release(&self) -> io::Result<()> {
        let mut s = self.lock();
        s.held = false;
        self.sync(&mut s);
        Ok(())
    }

    /// Raises `vector`. An unknown vector (such as the virtio NO_VECTOR)
    /// or disabled MSI-X goes nowhere (this function has no INTx pin).
    pub fn signal(&self, vector: u16) -> io::Result<()> {
        let mut s = self.lock();
        let v = usize::from(vector);
        if v >= s.entries.len() || !s.enabled {
            debug!("msix: interrupt on vector {vector} dropped (no such vector or MSI-X off)");
            return Ok(());
        }
        if s.held || s.function_masked || s.entries[v].masked() {
            s.pending[v] = true;
            return Ok(());
        }
        Self::deliver(&mut s, v)
    }

    fn deliver(s: &mut State, v: usize) -> io::Result<()> {
        s.signalled += 1;
        s.vectors[v].irq.write(1)
    }

    /// Brings routes up to date with the table and delivers pending
    /// interrupts of vectors that became deliverable.
    fn sync(&self, s: &mut State) {
        if !s.enabled {
            return;
        }
        for v in 0..s.entries.len() {
            let e = s.entries[v];
            if e.masked() {
                continue;
            }
            let msg = MsiMessage {
                address: e.address,
                data: e.data,
            };
            if s.routed[v] != Some(msg) {
                match self.router.route(s.vectors[v].gsi, msg) {
                    Ok(()) => s.routed[v] = Some(msg),
                    Err(e) => warn!("msix: routing vector {v}: {e}"),
                }
            }
            if s.pending[v] && !s.held && !s.function_masked {
                s.pending[v] = false;
                if let Err(e) = Self::deliver(s, v) {
                    warn!("msix: delivering vector {v}: {e}");
                }
            }
        }
    }

    /// A guest read of the table, 4 or 8 bytes, naturally aligned.
    /// Anything else reads as zero.
    pub fn table_read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        let s = self.lock();
        let Some((index, field)) = table_slot(offset, data.len(), s.entries.len()) else {
            return;
        };
        let e = s.entries[index];
        let mut raw = [0u8; 16];
        raw[0..8].copy_from_slice(&e.address.to_le_bytes());
        raw[8..12].copy_from_slice(&e.data.to_le_bytes());
        raw[12..16].copy_from_slice(&e.control.to_le_bytes());
        data.copy_from_slice(&raw[field..field + data.len()]);
    }

    /// A guest write to the table, 4 or 8 bytes, naturally aligned.
    pub fn table_write(&self, offset: u64, data: &[u8]) {
        let mut s = self.lock();
        let Some((index, field)) = table_slot(offset, data.len(), s.entries.len()) else {
            debug!(
                "msix: {}-byte table write at {offset:#x} ignored",
                data.len()
            );
            return;
        };
        let e = &mut s.entries[index];
        let mut raw = [0u8; 16];
        raw[0..8].copy_from_slice(&e.address.to_le_bytes());
        raw[8..12].copy_from_slice(&e.data.to_le_bytes());
        raw[12..16].copy_from_slice(&e.control.to_le_bytes());
        raw[field..field + data.len()].copy_from_slice(data);
        let word = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
        e.address = u64::from(word(0)) | (u64::from(word(4)) << 32);
        e.data = word(8);
        // Only the mask bit of Vector Control is defined.
        e.control = word(12) & VECTOR_MASKED;
        self.sync(&mut s);
    }

    /// A guest read of the pending bit array (read-only), 4 or 8 bytes.
    pub fn pba_read(&self, offset: u64, data: &mut [u8]) {
        data.fill(0);
        if !matches!(data.len(), 4 | 8) || !offset.is_multiple_of(data.len() as u64) {
            return;
        }
        let s = self.lock();
        for (i, byte) in data.iter_mut().enumerate() {
            for bit in 0..8 {
                let v = (offset as usize)
                    .saturating_add(i)
                    .saturating_mul(8)
                    .saturating_add(bit);
                if s.pending.get(v).copied().unwrap_or(false) {
                    *byte |= 1 << bit;
                }
            }
        }
    }

    /// Size in bytes of the pending bit array (whole qwords).
    pub fn pba_bytes(&self) -> u64 {
        (self.table_size() as u64).div_ceil(64) * 8
    }
}

/// The entry and byte within it that an access of `len` bytes at `offset`
/// touches, if it is a legal access (4 or 8 bytes, naturally aligned,
/// inside a table of `entries` entries).
fn table_slot(offset: u64, len: usize, entries: usize) -> Option<(usize, usize)> {
    if !matches!(len, 4 | 8) || !offset.is_multiple_of(len as u64) {
        return None;
    }
    let index = usize::try_from(offset / MSIX_ENTRY_SIZE).ok()?;
    (index < entries).then_some((index, (offset % MSIX_ENTRY_SIZE) as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Routes(Mutex<Vec<(u32, MsiMessage)>>);
    impl MsiRouting for Routes {
        fn route(&self, gsi: u32, msg: MsiMessage) -> io::Result<()> {
            self.0.lock().unwrap().push((gsi, msg));
            Ok(())
        }
    }

    fn setup(n: usize) -> (Msix, Arc<Routes>) {
        let routes = Arc::new(Routes::default());
        let vectors = (0..n)
            .map(|i| MsixVector {
                gsi: 24 + i as u32,
                irq: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
            })
            .collect();
        (Msix::new(vectors, routes.clone()), routes)
    }

    fn fired(m: &Msix, v: usize) -> u64 {
        m.lock().vectors[v].irq.read().unwrap_or(0)
    }

    fn w32(m: &Msix, off: u64, v: u32) {
        m.table_write(off, &v.to_le_bytes());
    }

    fn r32(m: &Msix, off: u64) -> u32 {
        let mut b = [0u8; 4];
        m.table_read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn program(m: &Msix, v: u64, addr: u64, data: u32) {
        w32(m, v * 16, addr as u32);
        w32(m, v * 16 + 4, (addr >> 32) as u32);
        w32(m, v * 16 + 8, data);
    }

    fn pba(m: &Msix) -> u64 {
        let mut b = [0u8; 8];
        m.pba_read(0, &mut b);
        u64::from_le_bytes(b)
    }

    #[test]
    fn entries_start_masked_and_round_trip() {
        let (m, routes) = setup(3);
        assert_eq!(r32(&m, 12), 1);
        program(&m, 1, 0xfee0_1000, 0x4041);
        assert_eq!(r32(&m, 16), 0xfee0_1000);
        assert_eq!(r32(&m, 20), 0);
        assert_eq!(r32(&m, 24), 0x4041);
        // Reserved control bits read as zero.
        w32(&m, 28, 0xffff_fffe);
        assert_eq!(r32(&m, 28), 0);
        let mut q = [0u8; 8];
        m.table_read(16, &mut q);
        assert_eq!(u64::from_le_bytes(q), 0xfee0_1000);
        // MSI-X is still off: nothing is routed yet.
        assert!(routes.0.lock().unwrap().is_empty());
    }

    #[test]
    fn a_masked_vector_sets_its_pending_bit_and_fires_on_unmask() {
        let (m, routes) = setup(2);
        m.set_control(true, false);
        program(&m, 1, 0xfee0_0000, 0x30);
        m.signal(1).unwrap();
        assert_eq!(fired(&m, 1), 0);
        assert_eq!(pba(&m), 0b10);
        // Unmask: routed first, then the pending interrupt is delivered.
        w32(&m, 16 + 12, 0);
        assert_eq!(
            routes.0.lock().unwrap().as_slice(),
            &[(
                25,
                MsiMessage {
                    address: 0xfee0_0000,
                    data: 0x30
                }
            )]
        );
        assert_eq!(fired(&m, 1), 1);
        assert_eq!(pba(&m), 0);
        m.signal(1).unwrap();
        assert_eq!(fired(&m, 1), 1);
        assert_eq!(m.signalled(), 2);
    }

    #[test]
    fn function_mask_and_hold_defer_every_vector() {
        let (m, _) = setup(2);
        m.set_control(true, false);
        w32(&m, 12, 0);
        m.set_control(true, true);
        m.signal(0).unwrap();
        assert_eq!(fired(&m, 0), 0);
        assert_eq!(pba(&m), 1);
        m.set_control(true, false);
        assert_eq!(fired(&m, 0), 1);
        m.hold();
        m.signal(0).unwrap();
        assert_eq!(fired(&m, 0), 0);
        m.release().unwrap();
        assert_eq!(fired(&m, 0), 1);
    }

    #[test]
    fn rewriting_an_unmasked_entry_reroutes_it_once() {
        let (m, routes) = setup(1);
        m.set_control(true, false);
        program(&m, 0, 0xfee0_0000, 0x30);
        w32(&m, 12, 0);
        w32(&m, 12, 0);
        w32(&m, 8, 0x31);
        let r = routes.0.lock().unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].1.data, 0x31);
    }

    #[test]
    fn disabled_msix_and_unknown_vectors_go_nowhere() {
        let (m, _) = setup(1);
        w32(&m, 12, 0);
        m.signal(0).unwrap();
        m.signal(0xffff).unwrap();
        assert_eq!(fired(&m, 0), 0);
        assert_eq!(m.signalled(), 0);
    }

    #[test]
    fn bad_table_accesses_are_ignored() {
        let (m, _) = setup(1);
        for (off, len) in [
            (2u64, 4usize),
            (4, 8),
            (16, 4),
            (0, 2),
            (0, 1),
            (u64::MAX - 3, 4),
        ] {
            m.table_write(off, &vec![0xff; len]);
            let mut b = vec![0xaa; len];
            m.table_read(off, &mut b);
            assert!(b.iter().all(|&x| x == 0), "{off:#x}+{len}");
        }
        assert_eq!(r32(&m, 12), 1);
        let mut b = [0xaau8; 4];
        m.pba_read(u64::MAX - 3, &mut b);
        assert_eq!(b, [0; 4]);
        assert_eq!(m.pba_bytes(), 8);
    }
}
