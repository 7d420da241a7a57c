//! The host bridge's memory window as one MMIO bus device, decoding the
//! BARs of bus 0 wherever they are. The vCPUs get a copy of the MMIO bus
//! when they start, so a function hot-plugged later, or a BAR the guest
//! moves (Linux assigns the BARs of hot-plugged functions itself), could
//! not be inserted into it; the window is on that bus from boot and its
//! own map changes instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::BusDevice;

type SharedBar = Arc<Mutex<dyn BusDevice>>;

/// Why a BAR could not be mapped or moved.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BarWindowError {
    /// The range is not inside the window.
    #[error("BAR {addr:#x}+{len:#x} is outside the PCI window")]
    Outside {
        /// Requested address.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// The range overlaps another BAR.
    #[error("BAR {addr:#x}+{len:#x} overlaps another BAR")]
    Overlap {
        /// Requested address.
        addr: u64,
        /// Its length.
        len: u64,
    },
    /// No BAR is mapped at this address.
    #[error("no BAR is mapped at {0:#x}")]
    NotMapped(u64),
}

/// The BARs inside `[base, base + size)`.
pub struct BarWindow {
    base: u64,
    size: u64,
    /// Offset in the window -> (length, device).
    bars: RwLock<BTreeMap<u64, (u64, SharedBar)>>,
}

impl BarWindow {
    /// An empty window.
    pub fn new(base: u64, size: u64) -> Self {
        Self {
            base,
            size,
            bars: RwLock::new(BTreeMap::new()),
        }
    }

    /// The window's base address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The window's length on the bus.
    pub fn len(&self) -> u64 {
        self.size
    }

    /// Whether the window is zero-sized.
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    fn offset(&self, addr: u64, len: u64) -> Result<u64, BarWindowError> {
        let off = addr.checked_sub(self.base);
        match off {
            Some(off) if len > 0 && off.checked_add(len).is_some_and(|e| e <= self.size) => Ok(off),
            _ => Err(BarWindowError::Outside { addr, len }),
        }
    }

    fn free(bars: &BTreeMap<u64, (u64, SharedBar)>, off: u64, len: u64) -> bool {
        let before = bars.range(..off + len).next_back();
        before.is_none_or(|(&b, &(l, _))| b + l <= off)
    }

    /// Maps `bar` at `[addr, addr + len)`.
    pub fn map(&self, addr: u64, len: u64, bar: SharedBar) -> Result<(), BarWindowError> {
        let off = self.offset(addr, len)?;
        let mut bars = self.bars.write().unwrap_or_else(|p| p.into_inner());
        if !Self::free(&bars, off, len) {
            return Err(BarWindowError::Overlap { addr, len });
        }
        bars.insert(off, (len, bar));
        Ok(())
    }

    /// Unmaps the BAR at `addr`.
    pub fn unmap(&self, addr: u64) -> Option<SharedBar> {
        let off = addr.checked_sub(self.base)?;
        let mut bars = self.bars.write().unwrap_or_else(|p| p.into_inner());
        bars.remove(&off).map(|(_, bar)| bar)
    }

    /// Moves the BAR at `from` to `to` (the guest reprogrammed it).
    pub fn relocate(&self, from: u64, to: u64) -> Result<(), BarWindowError> {
        let from_off = from
            .checked_sub(self.base)
            .ok_or(BarWindowError::NotMapped(from))?;
        let mut bars = self.bars.write().unwrap_or_else(|p| p.into_inner());
        let (len, bar) = bars
            .remove(&from_off)
            .ok_or(BarWindowError::NotMapped(from))?;
        let to_off = match self.offset(to, len) {
            Ok(off) if Self::free(&bars, off, len) => off,
            Ok(_) => {
                bars.insert(from_off, (len, bar));
                return Err(BarWindowError::Overlap { addr: to, len });
            }
            Err(e) => {
                bars.insert(from_off, (len, bar));
                return Err(e);
            }
        };
        bars.insert(to_off, (len, bar));
        Ok(())
    }

    /// `preferred` if `[preferred, +len)` is free, else the lowest free
    /// `len`-aligned range of the window.
    pub fn free_range(&self, preferred: u64, len: u64) -> Option<u64> {
        let bars = self.bars.read().unwrap_or_else(|p| p.into_inner());
        if let Ok(off) = self.offset(preferred, len) {
            if Self::free(&bars, off, len) {
                return Some(preferred);
            }
        }
        let mut off = 0u64;
        while off.checked_add(len)? <= self.size {
            if Self::free(&bars, off, len) {
                return Some(self.base + off);
            }
            off += len;
        }
        None
    }

    fn find(&self, offset: u64, len: usize) -> Option<(SharedBar, u64)> {
        let bars = self.bars.read().unwrap_or_else(|p| p.into_inner());
        let (&base, (bar_len, bar)) = bars.range(..=offset).next_back()?;
        let inner = offset - base;
        (inner + len as u64 <= *bar_len).then(|| (bar.clone(), inner))
    }
}

/// The window as the MMIO bus sees it (shares the map with the VMM).
pub struct BarWindowDevice(pub Arc<BarWindow>);

impl BusDevice for BarWindowDevice {
    fn read(&mut self, offset: u64, data: &mut [u8]) {
        // The map's lock is released before the BAR's own is taken.
        match self.0.find(offset, data.len()) {
            Some((bar, inner)) => bar
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .read(inner, data),
            // Nothing decodes it: master abort.
            None => data.fill(0xff),
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        if let Some((bar, inner)) = self.0.find(offset, data.len()) {
            bar.lock()
                .unwrap_or_else(|p| p.into_inner())
                .write(inner, data);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(Vec<(u64, Vec<u8>)>);
    impl BusDevice for Recorder {
        fn read(&mut self, offset: u64, data: &mut [u8]) {
            data.fill(offset as u8);
        }
        fn write(&mut self, offset: u64, data: &[u8]) {
            self.0.push((offset, data.to_vec()));
        }
    }

    const BASE: u64 = 0xc000_0000;

    #[test]
    fn accesses_reach_a_bar_where_it_is_mapped_and_follow_it_when_moved() {
        let window = Arc::new(BarWindow::new(BASE, 0x100_0000));
        let mut dev = BarWindowDevice(window.clone());
        let rec = Arc::new(Mutex::new(Recorder(Vec::new())));
        window.map(BASE + 0x18000, 0x8000, rec.clone()).unwrap();
        let mut b = [0u8; 2];
        dev.read(0x18000 + 0x10, &mut b);
        assert_eq!(b, [0x10, 0x10]);
        dev.write(0x18000 + 0x3000, &[1, 0]);
        assert_eq!(rec.lock().unwrap().0, vec![(0x3000, vec![1, 0])]);
        // Not mapped, crossing the BAR's end, past the window.
        dev.read(0x10000, &mut b);
        assert_eq!(b, [0xff; 2]);
        dev.read(0x18000 + 0x7fff, &mut b);
        assert_eq!(b, [0xff; 2]);
        dev.read(u64::MAX - 1, &mut b);
        assert_eq!(b, [0xff; 2]);
        // The guest moves it to the window's start.
        window.relocate(BASE + 0x18000, BASE).unwrap();
        dev.read(0x18000, &mut b);
        assert_eq!(b, [0xff; 2]);
        dev.read(0x20, &mut b);
        assert_eq!(b, [0x20, 0x20]);
        assert!(window.unmap(BASE).is_some());
        dev.write(0, &[2]);
        assert_eq!(rec.lock().unwrap().0.len(), 1);
    }

    #[test]
    fn overlaps_and_ranges_outside_the_window_are_refused() {
        let window = BarWindow::new(BASE, 0x10_0000);
        let a = Arc::new(Mutex::new(Recorder(Vec::new())));
        let b = Arc::new(Mutex::new(Recorder(Vec::new())));
        window.map(BASE, 0x8000, a.clone()).unwrap();
        window.map(BASE + 0x8000, 0x8000, b.clone()).unwrap();
        assert_eq!(
            window.map(BASE + 0x4000, 0x8000, a.clone()),
            Err(BarWindowError::Overlap {
                addr: BASE + 0x4000,
                len: 0x8000
            })
        );
        assert!(window.map(BASE - 0x8000, 0x8000, a.clone()).is_err());
        assert!(window.map(BASE + 0xf_c000, 0x8000, a.clone()).is_err());
        assert!(window.map(BASE, 0, a.clone()).is_err());
        // A move onto another BAR or out of the window leaves it in place.
        assert!(window.relocate(BASE, BASE + 0x8000).is_err());
        assert!(window.relocate(BASE, 0x1000).is_err());
        assert_eq!(
            window.relocate(BASE + 0x1000, BASE + 0x20000),
            Err(BarWindowError::NotMapped(BASE + 0x1000))
        );
        let mut dev = BarWindowDevice(Arc::new(window));
        let mut x = [0u8; 1];
        dev.read(0x5, &mut x);
        assert_eq!(x, [5], "still at the window's start");
    }

    #[test]
    fn free_range_prefers_the_given_place_then_the_lowest_gap() {
        let window = BarWindow::new(BASE, 0x20000);
        let r = || -> SharedBar { Arc::new(Mutex::new(Recorder(Vec::new()))) };
        assert_eq!(
            window.free_range(BASE + 0x8000, 0x8000),
            Some(BASE + 0x8000)
        );
        window.map(BASE + 0x8000, 0x8000, r()).unwrap();
        assert_eq!(window.free_range(BASE + 0x8000, 0x8000), Some(BASE));
        window.map(BASE, 0x8000, r()).unwrap();
        window.map(BASE + 0x18000, 0x8000, r()).unwrap();
        assert_eq!(window.free_range(BASE, 0x8000), Some(BASE + 0x10000));
        window.map(BASE + 0x10000, 0x8000, r()).unwrap();
        assert_eq!(window.free_range(BASE, 0x8000), None);
    }
}
