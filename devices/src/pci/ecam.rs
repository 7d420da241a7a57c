//! The two ways a guest reaches configuration space: the memory-mapped
//! ECAM window (PCIe enhanced configuration access, described by the ACPI
//! MCFG table) and the legacy 0xcf8/0xcfc port pair (configuration
//! mechanism #1, which Linux probes first on x86).

use std::sync::{Arc, Mutex};

use log::debug;

use super::root::PciRoot;
use crate::BusDevice;

/// Bytes of ECAM per bus (32 devices x 8 functions x 4 KiB).
pub const ECAM_BUS_SIZE: u64 = 1 << 20;
/// Size of the 0xcf8..0xcff port range.
pub const CONFIG_IO_PORTS: u64 = 8;

fn lock(root: &Mutex<PciRoot>) -> std::sync::MutexGuard<'_, PciRoot> {
    root.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether an access of `len` bytes at `offset` is one configuration
/// accesses allow: 1, 2 or 4 bytes, naturally aligned.
fn aligned(offset: u64, len: usize) -> bool {
    matches!(len, 1 | 2 | 4) && offset.is_multiple_of(len as u64)
}

/// The ECAM window of bus 0 onwards: offset = bus << 20 | device << 15 |
/// function << 12 | register.
pub struct EcamWindow(Arc<Mutex<PciRoot>>);

impl EcamWindow {
    /// A window onto `root`.
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        Self(root)
    }
}

/// Splits an ECAM offset into (bus, device, function, register).
fn ecam_decode(offset: u64) -> (u8, u8, u8, u16) {
    (
        ((offset >> 20) & 0xff) as u8,
        ((offset >> 15) & 0x1f) as u8,
        ((offset >> 12) & 0x7) as u8,
        (offset & 0xfff) as u16,
    )
}

impl BusDevice for EcamWindow {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        if !aligned(offset, data.len()) {
            debug!(
                "pci: unaligned {}-byte ECAM read at {offset:#x}",
                data.len()
            );
            data.fill(0xff);
            return;
        }
        let (b, d, f, reg) = ecam_decode(offset);
        lock(&self.0).config_read(b, d, f, reg, data);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if !aligned(offset, data.len()) {
            debug!(
                "pci: unaligned {}-byte ECAM write at {offset:#x}",
                data.len()
            );
            return;
        }
        let (b, d, f, reg) = ecam_decode(offset);
        lock(&self.0).config_write(b, d, f, reg, data);
    }
}

/// Ports 0xcf8 (address, 32 bits) and 0xcfc..0xcff (data).
pub struct ConfigIo {
    root: Arc<Mutex<PciRoot>>,
    address: u32,
}

impl ConfigIo {
    /// The port pair onto `root`.
    pub fn new(root: Arc<Mutex<PciRoot>>) -> Self {
        Self { root, address: 0 }
    }

    /// (bus, device, function, register) the address register selects,
    /// plus the byte offset `data_offset` into the data port, or None when
    /// the enable bit is clear.
    fn target(&self, data_offset: u64) -> Option<(u8, u8, u8, u16)> {
        if self.address & (1 << 31) == 0 {
            return None;
        }
        let a = self.address;
        Some((
            ((a >> 16) & 0xff) as u8,
            ((a >> 11) & 0x1f) as u8,
            ((a >> 8) & 0x7) as u8,
            (a & 0xfc) as u16 + data_offset as u16,
        ))
    }
}

impl BusDevice for ConfigIo {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        match offset {
            0 if data.len() == 4 => data.copy_from_slice(&self.address.to_le_bytes()),
            4..=7 if aligned(offset - 4, data.len()) => match self.target(offset - 4) {
                Some((b, d, f, reg)) => lock(&self.root).config_read(b, d, f, reg, data),
                None => data.fill(0xff),
            },
            _ => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        match offset {
            0 => {
                if let Ok(bytes) = <[u8; 4]>::try_from(data) {
                    self.address = u32::from_le_bytes(bytes);
                }
            }
            4..=7 if aligned(offset - 4, data.len()) => {
                if let Some((b, d, f, reg)) = self.target(offset - 4) {
                    lock(&self.root).config_write(b, d, f, reg, data);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Arc<Mutex<PciRoot>> {
        Arc::new(Mutex::new(PciRoot::new()))
    }

    #[test]
    fn ecam_reads_the_host_bridge_and_all_ones_elsewhere() {
        let mut ecam = EcamWindow::new(root());
        let mut id = [0u8; 4];
        ecam.read(0, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x0d57_8086);
        let mut class = [0u8; 2];
        ecam.read(0x0a, &mut class);
        assert_eq!(u16::from_le_bytes(class), 0x0600);
        ecam.read(1 << 15, &mut id);
        assert_eq!(id, [0xff; 4]);
        ecam.read(1, &mut id);
        assert_eq!(id, [0xff; 4]);
        // Command register of the host bridge via a 2-byte write.
        ecam.write(4, &2u16.to_le_bytes());
        ecam.read(4, &mut class);
        assert_eq!(u16::from_le_bytes(class), 2);
    }

    #[test]
    fn random_config_accesses_never_panic_and_keep_the_ids() {
        let r = root();
        let mut ecam = EcamWindow::new(r.clone());
        let mut io = ConfigIo::new(r);
        let mut s = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..50_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let len = [1usize, 2, 4, 8, 3][(s % 5) as usize];
            let bytes = (s >> 3).to_le_bytes();
            let mut out = vec![0u8; len];
            let off = (s >> 20) % (2 * ECAM_BUS_SIZE);
            ecam.write(off, &bytes[..len]);
            ecam.read(off, &mut out);
            let port = (s >> 40) % CONFIG_IO_PORTS;
            io.write(port, &bytes[..len]);
            io.read(port, &mut out);
        }
        let mut id = [0u8; 4];
        ecam.read(0, &mut id);
        assert_eq!(u32::from_le_bytes(id), 0x0d57_8086);
    }

    #[test]
    fn config_io_mechanism_one() {
        let mut io = ConfigIo::new(root());
        let mut d = [0u8; 4];
        // Enable bit clear: nothing selected.
        io.write(0, &0u32.to_le_bytes());
        io.read(4, &mut d);
        assert_eq!(d, [0xff; 4]);
        io.write(0, &0x8000_0000u32.to_le_bytes());
        io.read(0, &mut d);
        assert_eq!(u32::from_le_bytes(d), 0x8000_0000);
        io.read(4, &mut d);
        assert_eq!(u32::from_le_bytes(d), 0x0d57_8086);
        let mut w = [0u8; 2];
        io.read(6, &mut w);
        assert_eq!(u16::from_le_bytes(w), 0x0d57);
        io.write(0, &0x8000_0008u32.to_le_bytes());
        let mut b = [0u8; 1];
        io.read(7, &mut b);
        assert_eq!(b[0], 0x06);
        // Slot 3 is empty.
        io.write(0, &(0x8000_0000u32 | 3 << 11).to_le_bytes());
        io.read(4, &mut d);
        assert_eq!(d, [0xff; 4]);
        io.read(5, &mut w);
        assert_eq!(w, [0xff; 2]);
    }
}
