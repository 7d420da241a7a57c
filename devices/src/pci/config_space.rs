//! The 256-byte configuration space of one conventional PCI function
//! (type 0 header, PCI Local Bus 3.0 chapter 6).
//!
//! Guest writes go through a per-byte write mask, so identification,
//! status and capability bytes stay read-only. Base address registers are
//! memory, 32-bit, non-prefetchable and fixed where the VMM placed them:
//! the guest can size them (write all ones, read the size mask back) and
//! write the same address back, but a different address is refused (the
//! VMM would have to move its bus mapping and ioeventfds; not built).

use log::warn;

/// Size of the conventional configuration space.
pub const CONFIG_SPACE_SIZE: usize = 256;
/// First configuration register of BAR 0.
const BAR0: usize = 0x10;
/// Number of BARs in a type 0 header.
pub const BAR_COUNT: usize = 6;
const COMMAND: usize = 0x04;
const STATUS: usize = 0x06;
const CAPABILITIES_POINTER: usize = 0x34;
const INTERRUPT_LINE: usize = 0x3c;
/// Status register bit: the function has a capability list.
const STATUS_CAP_LIST: u16 = 1 << 4;
/// Command register bit: the function answers memory accesses.
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command register bit: the function may master the bus (DMA, MSI).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command register bit: INTx assertion disabled.
const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// Capabilities start after the header and are dword aligned.
const FIRST_CAPABILITY: usize = 0x40;

/// What identifies a function in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciHeader {
    /// Vendor ID.
    pub vendor_id: u16,
    /// Device ID.
    pub device_id: u16,
    /// Revision ID.
    pub revision: u8,
    /// Class code, sub-class and programming interface (24 bits).
    pub class: u32,
    /// Subsystem vendor ID.
    pub subsystem_vendor_id: u16,
    /// Subsystem ID.
    pub subsystem_id: u16,
}

/// Why a BAR or a capability could not be added.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigSpaceError {
    /// The BAR index is not below [`BAR_COUNT`].
    #[error("BAR index {0} out of range")]
    BarIndex(usize),
    /// A BAR size must be a power of two of at least 16 bytes, and its
    /// address aligned to it.
    #[error("BAR of {size:#x} bytes at {addr:#x}: size must be a power of two >= 16 and the address aligned to it")]
    BarGeometry {
        /// Requested address.
        addr: u32,
        /// Requested size.
        size: u32,
    },
    /// The capability does not fit in the configuration space.
    #[error("no room for a {0}-byte capability")]
    NoRoom(usize),
    /// A capability must hold at least its ID and next pointer, and its
    /// write mask must be as long as it.
    #[error("malformed capability ({0} bytes)")]
    Malformed(usize),
}

#[derive(Clone, Copy, Debug)]
struct Bar {
    addr: u32,
    size: u32,
    /// The guest wrote all ones: reads return the size mask.
    sizing: bool,
}

/// One function's configuration space.
#[derive(Clone, Debug)]
pub struct ConfigSpace {
    regs: [u8; CONFIG_SPACE_SIZE],
    wmask: [u8; CONFIG_SPACE_SIZE],
    bars: [Option<Bar>; BAR_COUNT],
    /// Where the next capability goes.
    next_capability: usize,
    /// The byte that points at the next capability (0x34 or the last
    /// capability's next field).
    last_next_pointer: usize,
}

impl ConfigSpace {
    /// A type 0 header with `header`'s identification, no BAR, no
    /// capability and no interrupt pin (the function signals MSI-X only).
    pub fn new(header: &PciHeader) -> Self {
        let mut s = Self {
            regs: [0; CONFIG_SPACE_SIZE],
            wmask: [0; CONFIG_SPACE_SIZE],
            bars: [None; BAR_COUNT],
            next_capability: FIRST_CAPABILITY,
            last_next_pointer: CAPABILITIES_POINTER,
        };
        s.put(0x00, &header.vendor_id.to_le_bytes());
        s.put(0x02, &header.device_id.to_le_bytes());
        s.regs[0x08] = header.revision;
        s.put(0x09, &header.class.to_le_bytes()[..3]);
        s.put(0x2c, &header.subsystem_vendor_id.to_le_bytes());
        s.put(0x2e, &header.subsystem_id.to_le_bytes());
        let command = COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE;
        s.wmask[COMMAND..COMMAND + 2].copy_from_slice(&command.to_le_bytes());
        // Cache line size and latency timer: plain storage to the guest.
        s.wmask[0x0c] = 0xff;
        s.wmask[0x0d] = 0xff;
        s.wmask[INTERRUPT_LINE] = 0xff;
        s
    }

    fn put(&mut self, offset: usize, bytes: &[u8]) {
        self.regs[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    /// Places BAR `index` (32-bit memory, non-prefetchable) at `addr`.
    pub fn set_bar(&mut self, index: usize, addr: u32, size: u32) -> Result<(), ConfigSpaceError> {
        if index >= BAR_COUNT {
            return Err(ConfigSpaceError::BarIndex(index));
        }
        if !size.is_power_of_two() || size < 16 || !addr.is_multiple_of(size) {
            return Err(ConfigSpaceError::BarGeometry { addr, size });
        }
        self.bars[index] = Some(Bar {
            addr,
            size,
            sizing: false,
        });
        Ok(())
    }

    /// Guest-physical address and size of BAR `index`, if it exists.
    pub fn bar(&self, index: usize) -> Option<(u64, u64)> {
        self.bars
            .get(index)
            .copied()
            .flatten()
            .map(|b| (u64::from(b.addr), u64::from(b.size)))
    }

    /// Appends a capability. `cap` starts with the capability ID and a
    /// placeholder for the next pointer (filled in here); `wmask` says
    /// which of its bits the guest may write. Returns its offset.
    pub fn add_capability(&mut self, cap: &[u8], wmask: &[u8]) -> Result<u8, ConfigSpaceError> {
        if cap.len() < 2 || wmask.len() != cap.len() {
            return Err(ConfigSpaceError::Malformed(cap.len()));
        }
        let offset = self.next_capability;
        let end = offset + cap.len();
        if end > CONFIG_SPACE_SIZE {
            return Err(ConfigSpaceError::NoRoom(cap.len()));
        }
        self.put(offset, cap);
        self.regs[offset + 1] = 0;
        self.wmask[offset..end].copy_from_slice(wmask);
        // The ID and the list links are never writable.
        self.wmask[offset] = 0;
        self.wmask[offset + 1] = 0;
        // Offsets fit a byte: end <= 256 was checked.
        self.regs[self.last_next_pointer] = offset as u8;
        self.last_next_pointer = offset + 1;
        self.next_capability = end.next_multiple_of(4);
        let status = u16::from_le_bytes([self.regs[STATUS], self.regs[STATUS + 1]]);
        self.put(STATUS, &(status | STATUS_CAP_LIST).to_le_bytes());
        Ok(offset as u8)
    }

    /// The Command register.
    pub fn command(&self) -> u16 {
        self.read_u16(COMMAND)
    }

    /// Whether the function answers accesses to its memory BARs.
    pub fn memory_enabled(&self) -> bool {
        self.command() & COMMAND_MEMORY != 0
    }

    /// A 16-bit register (no BAR), for the function's own use.
    pub fn read_u16(&self, offset: usize) -> u16 {
        match self.regs.get(offset..offset + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]),
            None => 0,
        }
    }

    fn bar_register(&self, index: usize) -> u32 {
        match self.bars[index] {
            // Memory space, 32-bit, non-prefetchable: type bits are zero.
            Some(b) if b.sizing => !(b.size - 1),
            Some(b) => b.addr,
            None => 0,
        }
    }

    /// A guest read of `data.len()` bytes at `offset`. Bytes past the
    /// configuration space read as zero.
    pub fn read(&self, offset: u16, data: &mut [u8]) {
        for (i, byte) in data.iter_mut().enumerate() {
            let at = usize::from(offset) + i;
            *byte = match at {
                _ if at >= CONFIG_SPACE_SIZE => 0,
                BAR0..=0x27 => {
                    let reg = self.bar_register((at - BAR0) / 4);
                    reg.to_le_bytes()[(at - BAR0) % 4]
                }
                _ => self.regs[at],
            };
        }
    }

    /// A guest write of `data` at `offset`: masked per byte, BARs dword
    /// at a time.
    pub fn write(&mut self, offset: u16, data: &[u8]) {
        let start = usize::from(offset);
        if (BAR0..BAR0 + 4 * BAR_COUNT).contains(&start) {
            self.write_bar(start, data);
            return;
        }
        for (i, &byte) in data.iter().enumerate() {
            let at = start + i;
            if at >= CONFIG_SPACE_SIZE {
                break;
            }
            let mask = self.wmask[at];
            self.regs[at] = (self.regs[at] & !mask) | (byte & mask);
        }
    }

    fn write_bar(&mut self, start: usize, data: &[u8]) {
        let index = (start - BAR0) / 4;
        let Some(bar) = self.bars[index].as_mut() else {
            return; // an absent BAR reads 0 whatever is written
        };
        let Ok(bytes) = <[u8; 4]>::try_from(data) else {
            warn!("pci: {}-byte write to BAR {index} ignored", data.len());
            return;
        };
        if !start.is_multiple_of(4) {
            return;
        }
        let value = u32::from_le_bytes(bytes);
        let addr = value & !(bar.size - 1);
        if value == u32::MAX {
            bar.sizing = true;
        } else {
            // A new address moves the BAR: Linux assigns BARs of hot-plugged
            // functions itself. Whoever decodes the BAR (the VMM's BAR
            // window) follows it, see `PciFunction::config_write` callers.
            bar.sizing = false;
            bar.addr = addr;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> PciHeader {
        PciHeader {
            vendor_id: 0x1af4,
            device_id: 0x1042,
            revision: 1,
            class: 0x01_8000,
            subsystem_vendor_id: 0x1af4,
            subsystem_id: 0x40,
        }
    }

    fn r32(c: &ConfigSpace, off: u16) -> u32 {
        let mut b = [0u8; 4];
        c.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    fn w32(c: &mut ConfigSpace, off: u16, v: u32) {
        c.write(off, &v.to_le_bytes());
    }

    #[test]
    fn identification_is_read_only() {
        let mut c = ConfigSpace::new(&header());
        assert_eq!(r32(&c, 0), 0x1042_1af4);
        assert_eq!(r32(&c, 8), 0x0180_0001);
        w32(&mut c, 0, 0xdead_beef);
        w32(&mut c, 8, 0xffff_ffff);
        w32(&mut c, 0x2c, 0);
        assert_eq!(r32(&c, 0), 0x1042_1af4);
        assert_eq!(r32(&c, 8), 0x0180_0001);
        assert_eq!(r32(&c, 0x2c), 0x0040_1af4);
        // No interrupt pin: MSI-X only.
        assert_eq!(r32(&c, 0x3c) >> 8 & 0xff, 0);
    }

    #[test]
    fn command_takes_only_the_implemented_bits() {
        let mut c = ConfigSpace::new(&header());
        assert!(!c.memory_enabled());
        c.write(4, &0xffffu16.to_le_bytes());
        assert_eq!(
            c.command(),
            COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE
        );
        assert!(c.memory_enabled());
        // Status stays as the device set it.
        c.write(6, &0xffffu16.to_le_bytes());
        assert_eq!(c.read_u16(6), 0);
    }

    #[test]
    fn bar_sizing_with_all_ones_then_restore() {
        let mut c = ConfigSpace::new(&header());
        c.set_bar(0, 0xc000_0000, 0x8000).unwrap();
        assert_eq!(r32(&c, 0x10), 0xc000_0000);
        w32(&mut c, 0x10, 0xffff_ffff);
        assert_eq!(r32(&c, 0x10), 0xffff_8000);
        w32(&mut c, 0x10, 0xc000_0000);
        assert_eq!(r32(&c, 0x10), 0xc000_0000);
        // Absent BARs size to zero: no resource.
        w32(&mut c, 0x14, 0xffff_ffff);
        assert_eq!(r32(&c, 0x14), 0);
        assert_eq!(c.bar(0), Some((0xc000_0000, 0x8000)));
        assert_eq!(c.bar(1), None);
    }

    #[test]
    fn a_bar_moves_whole_and_aligned_but_is_never_half_written() {
        let mut c = ConfigSpace::new(&header());
        c.set_bar(0, 0xc000_0000, 0x8000).unwrap();
        w32(&mut c, 0x10, 0xc100_0000);
        assert_eq!(r32(&c, 0x10), 0xc100_0000);
        assert_eq!(c.bar(0), Some((0xc100_0000, 0x8000)));
        c.write(0x10, &[0xff, 0xff]);
        assert_eq!(r32(&c, 0x10), 0xc100_0000);
        // Low bits of the address are hard-wired to the size.
        w32(&mut c, 0x10, 0xc000_0fff);
        assert_eq!(r32(&c, 0x10), 0xc000_0000);
        // Sizing does not move it.
        w32(&mut c, 0x10, 0xffff_ffff);
        assert_eq!(c.bar(0), Some((0xc000_0000, 0x8000)));
    }

    #[test]
    fn bad_bar_geometry_is_refused() {
        let mut c = ConfigSpace::new(&header());
        assert!(c.set_bar(6, 0, 0x1000).is_err());
        assert!(c.set_bar(0, 0x1000, 0x3000).is_err());
        assert!(c.set_bar(0, 0x1800, 0x1000).is_err());
        assert!(c.set_bar(0, 0, 8).is_err());
    }

    #[test]
    fn capability_list_walk_finds_every_capability_once() {
        let mut c = ConfigSpace::new(&header());
        let a = c.add_capability(&[0x09, 0, 16, 1], &[0; 4]).unwrap();
        let b = c
            .add_capability(&[0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[0; 12])
            .unwrap();
        let d = c.add_capability(&[0x09, 0, 16], &[0xff; 3]).unwrap();
        assert!(c.read_u16(STATUS) & STATUS_CAP_LIST != 0);
        let mut ptr = c.regs[CAPABILITIES_POINTER];
        let mut seen = Vec::new();
        while ptr != 0 {
            assert_eq!(ptr % 4, 0);
            assert!(usize::from(ptr) >= FIRST_CAPABILITY);
            let mut id = [0u8; 2];
            c.read(u16::from(ptr), &mut id);
            seen.push((ptr, id[0]));
            ptr = id[1];
            assert!(seen.len() <= 3, "the list loops");
        }
        assert_eq!(seen, vec![(a, 0x09), (b, 0x11), (d, 0x09)]);
        // ID and next pointer stay read-only even under an all-ones mask.
        c.write(u16::from(d), &[0, 0, 0]);
        let mut bytes = [0u8; 3];
        c.read(u16::from(d), &mut bytes);
        assert_eq!(bytes, [0x09, 0, 0]);
    }

    #[test]
    fn capabilities_that_do_not_fit_are_refused() {
        let mut c = ConfigSpace::new(&header());
        assert!(c.add_capability(&[0; 180], &[0; 180]).is_ok());
        assert_eq!(
            c.add_capability(&[0; 40], &[0; 40]),
            Err(ConfigSpaceError::NoRoom(40))
        );
        assert!(c.add_capability(&[1], &[0]).is_err());
        assert!(c.add_capability(&[1, 0], &[0]).is_err());
    }

    #[test]
    fn accesses_past_the_end_read_zero_and_write_nothing() {
        let mut c = ConfigSpace::new(&header());
        let mut b = [0xaau8; 4];
        c.read(0xffe, &mut b);
        assert_eq!(b, [0; 4]);
        c.write(0xfe, &[1, 2, 3, 4]);
        c.write(0x3c, &[7, 7, 7, 7]);
        assert_eq!(c.regs[0x3c], 7);
        assert_eq!(c.regs[0x3d], 0);
    }
}
