//! Puts virtio devices on the VM's MMIO bus: one 4 KiB virtio-mmio window
//! and one edge-triggered GSI per device, notifications through KVM
//! ioeventfds and interrupts through irqfds, so the data path never goes
//! through a vCPU thread's exit handler.

use std::sync::{Arc, Mutex};

use arch::acpi::VirtioMmioDesc;
use arch::layout;
use devices::event_loop::LoopHandle;
use devices::virtio::{
    MmioInterrupt, MmioTransport, VirtioDevice, MMIO_NOTIFY_OFFSET, MMIO_WINDOW_SIZE,
};
use devices::{Bus, IrqTrigger};
use kvm_ioctls::{IoEventAddress, VmFd};

use crate::vm::VmError;

/// GSIs below the virtio range that legacy devices own (COM1, GED); the
/// allocator skips them.
const RESERVED_GSIS: [u32; 2] = [layout::COM1_IRQ, layout::GED_IRQ];

/// Hands out virtio-mmio windows and GSIs in order.
pub struct VirtioMmioAllocator {
    next_window: u64,
    next_gsi: u32,
}

impl Default for VirtioMmioAllocator {
    fn default() -> Self {
        Self {
            next_window: layout::VIRTIO_MMIO_START,
            next_gsi: layout::VIRTIO_MMIO_FIRST_IRQ,
        }
    }
}

impl VirtioMmioAllocator {
    /// The next free (window base, GSI), or None when the IOAPIC has no pin left.
    pub fn allocate(&mut self) -> Option<(u64, u32)> {
        while RESERVED_GSIS.contains(&self.next_gsi) {
            self.next_gsi += 1;
        }
        if self.next_gsi >= layout::IOAPIC_NUM_PINS {
            return None;
        }
        let slot = (self.next_window, self.next_gsi);
        self.next_window += layout::VIRTIO_MMIO_SIZE;
        self.next_gsi += 1;
        Some(slot)
    }
}

/// Wires `device` into the VM: a transport on `mmio_bus` whose data path
/// runs on `device_loop`, its irqfd and its queue ioeventfds. Returns what
/// the DSDT must describe and the transport's interrupt.
pub fn attach(
    vm_fd: &VmFd,
    mmio_bus: &mut Bus,
    alloc: &mut VirtioMmioAllocator,
    mem: &devices::virtio::GuestMemoryMmap,
    device: Arc<Mutex<dyn VirtioDevice>>,
    device_loop: LoopHandle,
) -> Result<(VirtioMmioDesc, Arc<MmioInterrupt>), VmError> {
    let (base, gsi) = alloc
        .allocate()
        .ok_or_else(|| VmError::Device("no interrupt line left for a virtio device".into()))?;
    let irq = IrqTrigger::new().map_err(|e| VmError::Io("eventfd", e))?;
    let transport = MmioTransport::new(device, mem.clone(), irq, device_loop)
        .map_err(|e| VmError::Io("creating the virtio-mmio transport", e))?;
    vm_fd
        .register_irqfd(transport.irq_evt(), gsi)
        .map_err(|e| VmError::Kvm("KVM_IRQFD", e))?;
    for (index, evt) in transport.queue_evts().iter().enumerate() {
        // u32 datamatch: the ioeventfd fires only on 4-byte writes of `index`.
        let datamatch = u32::try_from(index).unwrap_or(u32::MAX);
        vm_fd
            .register_ioevent(
                evt,
                &IoEventAddress::Mmio(base + MMIO_NOTIFY_OFFSET),
                datamatch,
            )
            .map_err(|e| VmError::Kvm("KVM_IOEVENTFD", e))?;
    }
    let interrupt = transport.interrupt();
    mmio_bus
        .insert(Arc::new(Mutex::new(transport)), base, MMIO_WINDOW_SIZE)
        .map_err(|e| VmError::Device(e.to_string()))?;
    Ok((
        VirtioMmioDesc {
            base,
            size: MMIO_WINDOW_SIZE,
            gsi,
        },
        interrupt,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_skips_legacy_gsis_and_stops_at_the_last_pin() {
        let mut a = VirtioMmioAllocator::default();
        let mut gsis = Vec::new();
        while let Some((base, gsi)) = a.allocate() {
            assert_eq!(
                base,
                layout::VIRTIO_MMIO_START + gsis.len() as u64 * layout::VIRTIO_MMIO_SIZE
            );
            gsis.push(gsi);
        }
        assert!(!gsis.contains(&layout::GED_IRQ) && !gsis.contains(&layout::COM1_IRQ));
        assert_eq!(gsis.first(), Some(&layout::VIRTIO_MMIO_FIRST_IRQ));
        assert_eq!(gsis.last(), Some(&(layout::IOAPIC_NUM_PINS - 1)));
    }
}
