//! Puts virtio devices on a PCI root bus (`--virtio-transport pci`): the
//! bus's ECAM window and 0xcf8 ports, one BAR 0 per device in the 32-bit
//! PCI window, notifications through KVM ioeventfds and MSI-X through
//! irqfds whose GSIs KVM routes to the messages the guest programs; and
//! the ACPI hotplug controller, with [`PciSegment::detach`] to take a
//! function back off the bus.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arch::acpi::PciHostDesc;
use arch::layout;
use devices::event_loop::LoopHandle;
use devices::pci::ecam::CONFIG_IO_PORTS;
use devices::pci::{
    BarWindow, BarWindowDevice, ConfigIo, EcamWindow, MsiMessage, MsiRouting, MsixVector,
    PciHotplug, PciHotplugRegisters, PciRoot,
};
use devices::transport::virtio_pci::{self, PciInterrupt, VirtioPciDevice};
use devices::virtio::{GuestMemoryMmap, VirtioDevice};
use devices::Bus;
use kvm_bindings::{
    kvm_irq_routing_entry, KvmIrqRouting, KVM_IRQCHIP_IOAPIC, KVM_IRQCHIP_PIC_MASTER,
    KVM_IRQCHIP_PIC_SLAVE, KVM_IRQ_ROUTING_IRQCHIP, KVM_IRQ_ROUTING_MSI,
};
use kvm_ioctls::{IoEventAddress, NoDatamatch, VmFd};
use vmm_sys_util::eventfd::EventFd;

use crate::vm::VmError;

mod relocate;
use relocate::{SlotFunction, Wiring};

/// KVM's limit on GSI routes (`KVM_MAX_IRQ_ROUTES`).
const MAX_GSI: u32 = 4096;

/// Which transport carries the virtio devices of the VMs this process
/// boots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VirtioTransport {
    /// virtio-mmio windows described in the DSDT.
    Mmio,
    /// virtio-pci functions on a PCI root bus, MSI-X interrupts (the
    /// default, as upstream, which has no other transport).
    #[default]
    Pci,
}

impl std::str::FromStr for VirtioTransport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mmio" => Ok(Self::Mmio),
            "pci" => Ok(Self::Pci),
            _ => Err(format!("'{s}' is neither 'mmio' nor 'pci'")),
        }
    }
}

static TRANSPORT: AtomicU8 = AtomicU8::new(VirtioTransport::Pci as u8);

/// Chooses the transport for every VM booted from now on (set once, from
/// the command line, before the VMM thread starts).
pub fn set_transport(t: VirtioTransport) {
    TRANSPORT.store(t as u8, Ordering::SeqCst);
}

/// The transport chosen by [`set_transport`].
pub fn transport() -> VirtioTransport {
    match TRANSPORT.load(Ordering::SeqCst) {
        0 => VirtioTransport::Mmio,
        _ => VirtioTransport::Pci,
    }
}

/// KVM's GSI routing table: the irqchip pins as KVM sets them up by
/// default plus one MSI route per programmed MSI-X vector. KVM replaces
/// the whole table on each update, so the whole table is kept here.
pub struct KvmMsiRoutes {
    vm_fd: Arc<VmFd>,
    msi: Mutex<BTreeMap<u32, MsiMessage>>,
}

impl KvmMsiRoutes {
    /// Routes for `vm_fd`, with no MSI route yet.
    pub fn new(vm_fd: Arc<VmFd>) -> Self {
        Self {
            vm_fd,
            msi: Mutex::new(BTreeMap::new()),
        }
    }
}

fn irqchip_route(gsi: u32, chip: u32, pin: u32) -> kvm_irq_routing_entry {
    let mut e = kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_IRQCHIP,
        ..Default::default()
    };
    e.u.irqchip.irqchip = chip;
    e.u.irqchip.pin = pin;
    e
}

/// The routes `KVM_CREATE_IRQCHIP` installs (virt/kvm/irqchip.c's default
/// table): GSIs 0-15 to the IOAPIC and the 8259s, 16-23 to the IOAPIC.
fn default_irqchip_routes() -> Vec<kvm_irq_routing_entry> {
    let mut routes = Vec::new();
    for gsi in 0..layout::IOAPIC_NUM_PINS {
        routes.push(irqchip_route(gsi, KVM_IRQCHIP_IOAPIC, gsi));
        if gsi < 8 {
            routes.push(irqchip_route(gsi, KVM_IRQCHIP_PIC_MASTER, gsi));
        } else if gsi < 16 {
            routes.push(irqchip_route(gsi, KVM_IRQCHIP_PIC_SLAVE, gsi - 8));
        }
    }
    routes
}

fn msi_route(gsi: u32, msg: &MsiMessage) -> kvm_irq_routing_entry {
    let mut e = kvm_irq_routing_entry {
        gsi,
        type_: KVM_IRQ_ROUTING_MSI,
        ..Default::default()
    };
    e.u.msi.address_lo = msg.address as u32;
    e.u.msi.address_hi = (msg.address >> 32) as u32;
    e.u.msi.data = msg.data;
    e
}

impl KvmMsiRoutes {
    /// Drops the MSI routes of `gsis` (an unplugged device's vectors), so
    /// a GSI handed out again starts without a stale message.
    pub fn forget(&self, gsis: &[u32]) -> io::Result<()> {
        let mut msi = self.msi.lock().unwrap_or_else(|p| p.into_inner());
        let before = msi.len();
        msi.retain(|gsi, _| !gsis.contains(gsi));
        if msi.len() == before {
            return Ok(());
        }
        Self::apply(&self.vm_fd, &msi)
    }

    fn apply(vm_fd: &VmFd, msi: &BTreeMap<u32, MsiMessage>) -> io::Result<()> {
        let mut entries = default_irqchip_routes();
        entries.extend(msi.iter().map(|(&gsi, m)| msi_route(gsi, m)));
        let table = KvmIrqRouting::from_entries(&entries)
            .map_err(|e| io::Error::other(format!("GSI routing table: {e:?}")))?;
        vm_fd
            .set_gsi_routing(&table)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }
}

impl MsiRouting for KvmMsiRoutes {
    fn route(&self, gsi: u32, msg: MsiMessage) -> io::Result<()> {
        let mut msi = self.msi.lock().unwrap_or_else(|p| p.into_inner());
        msi.insert(gsi, msg);
        let mut entries = default_irqchip_routes();
        entries.extend(msi.iter().map(|(&gsi, m)| msi_route(gsi, m)));
        let table = KvmIrqRouting::from_entries(&entries)
            .map_err(|e| io::Error::other(format!("GSI routing table: {e:?}")))?;
        self.vm_fd
            .set_gsi_routing(&table)
            .map_err(|e| io::Error::from_raw_os_error(e.errno()))
    }
}

/// The PCI root bus of a VM and what it hands out: slots, BAR space
/// (one BAR 0 per slot, at the slot's place in the [`BarWindow`]), GSIs.
pub struct PciSegment {
    root: Arc<Mutex<PciRoot>>,
    routes: Arc<KvmMsiRoutes>,
    bars: Arc<BarWindow>,
    hotplug: Arc<PciHotplug>,
    next_gsi: u32,
    /// GSIs of unplugged devices, handed out again first.
    free_gsis: Vec<u32>,
}

/// What [`PciSegment::attach`] wired into KVM for one function, to undo
/// it at unplug. The eventfds are duplicates of the ones KVM knows (KVM
/// matches an eventfd by its file, not by the descriptor number).
pub struct PciAttachment {
    /// The function's slot on bus 0.
    pub slot: u8,
    vectors: Vec<(u32, EventFd)>,
    /// BAR 0 and the queue ioeventfds, shared with the slot (the guest
    /// may move the BAR).
    wiring: Arc<Mutex<Wiring>>,
}

impl PciSegment {
    /// The root bus with its host bridge, reachable through ECAM on
    /// `mmio_bus` and ports 0xcf8-0xcff on `io_bus`.
    pub fn new(vm_fd: Arc<VmFd>, io_bus: &mut Bus, mmio_bus: &mut Bus) -> Result<Self, VmError> {
        let root = Arc::new(Mutex::new(PciRoot::new()));
        mmio_bus
            .insert(
                Arc::new(Mutex::new(EcamWindow::new(root.clone()))),
                layout::PCI_ECAM_START,
                layout::PCI_ECAM_SIZE,
            )
            .map_err(|e| VmError::Device(format!("PCI ECAM: {e}")))?;
        io_bus
            .insert(
                Arc::new(Mutex::new(ConfigIo::new(root.clone()))),
                u64::from(layout::PCI_CONFIG_IO_PORT),
                CONFIG_IO_PORTS,
            )
            .map_err(|e| VmError::Device(format!("PCI configuration ports: {e}")))?;
        let bars = Arc::new(BarWindow::new(
            layout::PCI_MMIO_START,
            layout::PCI_MMIO_SIZE,
        ));
        mmio_bus
            .insert(
                Arc::new(Mutex::new(BarWindowDevice(bars.clone()))),
                layout::PCI_MMIO_START,
                bars.len(),
            )
            .map_err(|e| VmError::Device(format!("PCI BAR window: {e}")))?;
        let hotplug = Arc::new(PciHotplug::new().map_err(|e| VmError::Io("eventfd", e))?);
        mmio_bus
            .insert(
                Arc::new(Mutex::new(PciHotplugRegisters(hotplug.clone()))),
                layout::PCI_HOTPLUG_START,
                layout::PCI_HOTPLUG_SIZE,
            )
            .map_err(|e| VmError::Device(format!("PCI hotplug registers: {e}")))?;
        Ok(Self {
            root,
            routes: Arc::new(KvmMsiRoutes::new(vm_fd)),
            bars,
            hotplug,
            next_gsi: layout::PCI_MSI_FIRST_GSI,
            free_gsis: Vec::new(),
        })
    }

    /// The ACPI hotplug controller of this bus.
    pub fn hotplug(&self) -> &Arc<PciHotplug> {
        &self.hotplug
    }

    fn take_gsis(&mut self, n: usize) -> Result<Vec<u32>, VmError> {
        let reused = n.min(self.free_gsis.len());
        let fresh = u32::try_from(n - reused).unwrap_or(u32::MAX);
        if self.next_gsi.saturating_add(fresh) > MAX_GSI {
            return Err(VmError::Device("no GSI left for MSI-X vectors".into()));
        }
        let mut gsis = self.free_gsis.split_off(self.free_gsis.len() - reused);
        gsis.extend(self.next_gsi..self.next_gsi + fresh);
        self.next_gsi += fresh;
        Ok(gsis)
    }

    /// What the MCFG table and the DSDT's host bridge describe.
    pub fn host_desc(&self) -> PciHostDesc {
        PciHostDesc {
            ecam_base: layout::PCI_ECAM_START,
            ecam_size: layout::PCI_ECAM_SIZE,
            mmio_base: layout::PCI_MMIO_START,
            mmio_size: layout::PCI_MMIO_SIZE,
            config_io_port: layout::PCI_CONFIG_IO_PORT,
        }
    }

    /// Puts `device` on the bus in the lowest free slot: its BAR 0 in the
    /// slot's place of the BAR window, its queue ioeventfds, one irqfd per
    /// MSI-X vector. Its data path runs on `device_loop`. Works the same
    /// while the guest runs (hotplug): nothing here is copied into the
    /// vCPUs.
    pub fn attach(
        &mut self,
        vm_fd: &VmFd,
        mem: &GuestMemoryMmap,
        device: Arc<Mutex<dyn VirtioDevice>>,
        device_loop: LoopHandle,
    ) -> Result<(Arc<PciInterrupt>, PciAttachment), VmError> {
        let slot = lock(&self.root)
            .free_slot()
            .map_err(|e| VmError::Device(e.to_string()))?;
        // The slot's place in the window (slot 1 at its start; the host
        // bridge has no BAR), unless the guest moved another BAR there.
        let preferred =
            layout::PCI_MMIO_START + u64::from(slot.saturating_sub(1)) * virtio_pci::BAR_SIZE;
        let bar = self
            .bars
            .free_range(preferred, virtio_pci::BAR_SIZE)
            .ok_or_else(|| VmError::Device("the PCI BAR window is full".into()))?;
        let n = virtio_pci::vectors_for(&*device.lock().unwrap_or_else(|p| p.into_inner()));
        let gsis = self.take_gsis(n)?;
        let mut wired = PciAttachment {
            slot,
            vectors: Vec::with_capacity(n),
            wiring: Arc::new(Mutex::new(Wiring {
                bar,
                queue_evts: Vec::new(),
            })),
        };
        match self.wire(vm_fd, mem, device, device_loop, &gsis, &mut wired) {
            Ok(interrupt) => Ok((interrupt, wired)),
            Err(e) => {
                self.unwire(vm_fd, &wired);
                self.free_gsis.extend(gsis);
                Err(e)
            }
        }
    }

    fn wire(
        &mut self,
        vm_fd: &VmFd,
        mem: &GuestMemoryMmap,
        device: Arc<Mutex<dyn VirtioDevice>>,
        device_loop: LoopHandle,
        gsis: &[u32],
        wired: &mut PciAttachment,
    ) -> Result<Arc<PciInterrupt>, VmError> {
        let mut vectors = Vec::with_capacity(gsis.len());
        for &gsi in gsis {
            let irq = EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmError::Io("eventfd", e))?;
            let kept = irq.try_clone().map_err(|e| VmError::Io("eventfd", e))?;
            vm_fd
                .register_irqfd(&irq, gsi)
                .map_err(|e| VmError::Kvm("KVM_IRQFD", e))?;
            wired.vectors.push((gsi, kept));
            vectors.push(MsixVector { gsi, irq });
        }
        let bar = lock(&wired.wiring).bar;
        let function = VirtioPciDevice::new(
            device,
            mem.clone(),
            device_loop,
            bar,
            vectors,
            self.routes.clone(),
        )
        .map_err(|e| VmError::Device(format!("virtio-pci: {e}")))?;
        for (index, evt) in function.queue_evts().iter().enumerate() {
            let addr = IoEventAddress::Mmio(virtio_pci::notify_address(bar, index));
            let kept = evt.try_clone().map_err(|e| VmError::Io("eventfd", e))?;
            vm_fd
                .register_ioevent(evt, &addr, NoDatamatch)
                .map_err(|e| VmError::Kvm("KVM_IOEVENTFD", e))?;
            lock(&wired.wiring).queue_evts.push(kept);
        }
        let interrupt = function.interrupt();
        let function = Arc::new(Mutex::new(function));
        self.bars
            .map(bar, virtio_pci::BAR_SIZE, function.clone())
            .map_err(|e| VmError::Device(e.to_string()))?;
        let slot_function = SlotFunction {
            function,
            wiring: wired.wiring.clone(),
            bars: self.bars.clone(),
            vm_fd: self.routes.vm_fd.clone(),
        };
        lock(&self.root)
            .insert(wired.slot, Arc::new(Mutex::new(slot_function)))
            .map_err(|e| VmError::Device(e.to_string()))?;
        Ok(interrupt)
    }

    /// Takes an attached function off the bus and out of KVM: the guest
    /// no longer reaches its configuration space or BAR, its queue
    /// notifications and vectors are unregistered and its GSIs freed.
    /// The device thread is the caller's to stop.
    pub fn detach(&mut self, vm_fd: &VmFd, wired: PciAttachment) {
        self.unwire(vm_fd, &wired);
        let gsis: Vec<u32> = wired.vectors.iter().map(|(gsi, _)| *gsi).collect();
        if let Err(e) = self.routes.forget(&gsis) {
            log::warn!("PCI slot {}: dropping its MSI routes: {e}", wired.slot);
        }
        self.free_gsis.extend(gsis);
    }

    fn unwire(&mut self, vm_fd: &VmFd, wired: &PciAttachment) {
        // Off the root bus first: no configuration write (BAR move) can
        // race with the rest once this returns.
        lock(&self.root).remove(wired.slot);
        let wiring = lock(&wired.wiring);
        self.bars.unmap(wiring.bar);
        for (index, evt) in wiring.queue_evts.iter().enumerate() {
            let addr = IoEventAddress::Mmio(virtio_pci::notify_address(wiring.bar, index));
            if let Err(e) = vm_fd.unregister_ioevent(evt, &addr, NoDatamatch) {
                log::warn!(
                    "PCI slot {}: unregistering a queue ioeventfd: {e}",
                    wired.slot
                );
            }
        }
        for (gsi, irq) in &wired.vectors {
            if let Err(e) = vm_fd.unregister_irqfd(irq, *gsi) {
                log::warn!(
                    "PCI slot {}: unregistering the irqfd of GSI {gsi}: {e}",
                    wired.slot
                );
            }
        }
    }
}

fn lock<T: ?Sized>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transport_names() {
        assert_eq!("pci".parse(), Ok(VirtioTransport::Pci));
        assert_eq!("mmio".parse(), Ok(VirtioTransport::Mmio));
        assert!("PCI".parse::<VirtioTransport>().is_err());
    }

    #[test]
    fn default_routes_match_kvms_irqchip_table() {
        let r = default_irqchip_routes();
        // 24 IOAPIC pins + 16 PIC pins.
        assert_eq!(r.len(), 40);
        let pins: Vec<(u32, u32, u32)> = r
            .iter()
            .map(|e| {
                assert_eq!(e.type_, KVM_IRQ_ROUTING_IRQCHIP);
                // SAFETY: an irqchip route (checked above): `u.irqchip` is
                // the member that was written.
                let (chip, pin) = unsafe { (e.u.irqchip.irqchip, e.u.irqchip.pin) };
                (e.gsi, chip, pin)
            })
            .collect();
        assert!(pins.contains(&(9, KVM_IRQCHIP_PIC_SLAVE, 1)));
        assert!(pins.contains(&(23, KVM_IRQCHIP_IOAPIC, 23)));
        assert!(!pins.contains(&(16, KVM_IRQCHIP_PIC_SLAVE, 8)));
        let m = msi_route(
            30,
            &MsiMessage {
                address: 0x1_fee0_0000,
                data: 0x41,
            },
        );
        assert_eq!(m.type_, KVM_IRQ_ROUTING_MSI);
        // SAFETY: an MSI route (checked above): `u.msi` was written.
        let (lo, hi, data) = unsafe { (m.u.msi.address_lo, m.u.msi.address_hi, m.u.msi.data) };
        assert_eq!((lo, hi, data), (0xfee0_0000, 1, 0x41));
    }
}
