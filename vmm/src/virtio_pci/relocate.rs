//! A virtio-pci function as the root bus holds it: configuration accesses
//! go to the function, and when the guest moves BAR 0 (Linux assigns the
//! BARs of hot-plugged functions itself, usually elsewhere than the VMM
//! put them) the BAR window and the queues' KVM ioeventfds move with it,
//! on the vCPU that wrote the BAR, before it returns to the guest.

use std::sync::{Arc, Mutex, MutexGuard};

use devices::pci::{BarWindow, PciFunction};
use devices::transport::virtio_pci::{self, VirtioPciDevice};
use kvm_ioctls::{IoEventAddress, NoDatamatch, VmFd};
use vmm_sys_util::eventfd::EventFd;

/// Where a function's BAR 0 is and what KVM knows about it. Shared by the
/// slot (moves) and the VMM's attachment record (unplug).
pub struct Wiring {
    /// BAR 0's guest-physical address.
    pub bar: u64,
    /// Duplicates of the queue notification eventfds registered at
    /// `notify_address(bar, i)`.
    pub queue_evts: Vec<EventFd>,
}

/// Moves queue `index`'s ioeventfd from BAR `from` to BAR `to`.
fn move_ioevent(vm_fd: &VmFd, evt: &EventFd, index: usize, from: u64, to: u64) {
    let old = IoEventAddress::Mmio(virtio_pci::notify_address(from, index));
    if let Err(e) = vm_fd.unregister_ioevent(evt, &old, NoDatamatch) {
        log::warn!("virtio-pci: unregistering queue {index}'s ioeventfd at {from:#x}: {e}");
    }
    let new = IoEventAddress::Mmio(virtio_pci::notify_address(to, index));
    // Without it the notification still works, through the BAR (an exit).
    if let Err(e) = vm_fd.register_ioevent(evt, &new, NoDatamatch) {
        log::warn!("virtio-pci: registering queue {index}'s ioeventfd at {to:#x}: {e}");
    }
}

/// The root bus's view of one function.
pub struct SlotFunction {
    pub function: Arc<Mutex<VirtioPciDevice>>,
    pub wiring: Arc<Mutex<Wiring>>,
    pub bars: Arc<BarWindow>,
    pub vm_fd: Arc<VmFd>,
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl PciFunction for SlotFunction {
    fn config_read(&mut self, reg: u16, data: &mut [u8]) {
        lock(&self.function).config_read(reg, data);
    }

    fn config_write(&mut self, reg: u16, data: &[u8]) {
        let mut function = lock(&self.function);
        function.config_write(reg, data);
        let now = function.bar();
        let mut wiring = lock(&self.wiring);
        let was = wiring.bar;
        if now == was {
            return;
        }
        match self.bars.relocate(was, now) {
            Ok(()) => {
                for (index, evt) in wiring.queue_evts.iter().enumerate() {
                    move_ioevent(&self.vm_fd, evt, index, was, now);
                }
                wiring.bar = now;
                log::info!("virtio-pci: the guest moved a BAR 0 from {was:#x} to {now:#x}");
            }
            Err(e) => {
                log::warn!(
                    "virtio-pci: BAR 0 cannot move from {was:#x} to {now:#x}: {e}; it stays"
                );
                let back = u32::try_from(was).unwrap_or(u32::MAX).to_le_bytes();
                function.config_write(0x10, &back);
            }
        }
    }
}
