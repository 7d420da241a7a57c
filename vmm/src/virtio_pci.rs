//! Puts virtio devices on a PCI root bus (`--virtio-transport pci`): the
//! bus's ECAM window and 0xcf8 ports, one BAR 0 per device in the 32-bit
//! PCI window, notifications through KVM ioeventfds and MSI-X through
//! irqfds whose GSIs KVM routes to the messages the guest programs.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use arch::acpi::PciHostDesc;
use arch::layout;
use devices::event_loop::LoopHandle;
use devices::pci::ecam::CONFIG_IO_PORTS;
use devices::pci::{ConfigIo, EcamWindow, MsiMessage, MsiRouting, MsixVector, PciRoot};
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

/// KVM's limit on GSI routes (`KVM_MAX_IRQ_ROUTES`).
const MAX_GSI: u32 = 4096;

/// Which transport carries the virtio devices of the VMs this process
/// boots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VirtioTransport {
    /// virtio-mmio windows described in the DSDT (the default).
    #[default]
    Mmio,
    /// virtio-pci functions on a PCI root bus, MSI-X interrupts.
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

static TRANSPORT: AtomicU8 = AtomicU8::new(0);

/// Chooses the transport for every VM booted from now on (set once, from
/// the command line, before the VMM thread starts).
pub fn set_transport(t: VirtioTransport) {
    TRANSPORT.store(t as u8, Ordering::SeqCst);
}

/// The transport chosen by [`set_transport`].
pub fn transport() -> VirtioTransport {
    match TRANSPORT.load(Ordering::SeqCst) {
        1 => VirtioTransport::Pci,
        _ => VirtioTransport::Mmio,
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

/// The PCI root bus of a VM and what it hands out: slots, BAR space, GSIs.
pub struct PciSegment {
    root: Arc<Mutex<PciRoot>>,
    routes: Arc<KvmMsiRoutes>,
    next_bar: u64,
    next_gsi: u32,
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
        Ok(Self {
            root,
            routes: Arc::new(KvmMsiRoutes::new(vm_fd)),
            next_bar: layout::PCI_MMIO_START,
            next_gsi: layout::PCI_MSI_FIRST_GSI,
        })
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

    /// Puts `device` on the bus: a BAR 0 on `mmio_bus`, its queue
    /// ioeventfds, one irqfd per MSI-X vector, a slot. Its data path runs
    /// on `device_loop`.
    pub fn attach(
        &mut self,
        vm_fd: &VmFd,
        mmio_bus: &mut Bus,
        mem: &GuestMemoryMmap,
        device: Arc<Mutex<dyn VirtioDevice>>,
        device_loop: LoopHandle,
    ) -> Result<Arc<PciInterrupt>, VmError> {
        let bar = self.next_bar;
        if bar + virtio_pci::BAR_SIZE > layout::PCI_MMIO_START + layout::PCI_MMIO_SIZE {
            return Err(VmError::Device("the PCI BAR window is full".into()));
        }
        let n = virtio_pci::vectors_for(&*device.lock().unwrap_or_else(|p| p.into_inner()));
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        if self.next_gsi.saturating_add(n32) > MAX_GSI {
            return Err(VmError::Device("no GSI left for MSI-X vectors".into()));
        }
        let mut vectors = Vec::with_capacity(n);
        for gsi in self.next_gsi..self.next_gsi + n32 {
            let irq = EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmError::Io("eventfd", e))?;
            vm_fd
                .register_irqfd(&irq, gsi)
                .map_err(|e| VmError::Kvm("KVM_IRQFD", e))?;
            vectors.push(MsixVector { gsi, irq });
        }
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
            vm_fd
                .register_ioevent(evt, &addr, NoDatamatch)
                .map_err(|e| VmError::Kvm("KVM_IOEVENTFD", e))?;
        }
        let interrupt = function.interrupt();
        let function = Arc::new(Mutex::new(function));
        mmio_bus
            .insert(function.clone(), bar, virtio_pci::BAR_SIZE)
            .map_err(|e| VmError::Device(e.to_string()))?;
        self.root
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(function)
            .map_err(|e| VmError::Device(e.to_string()))?;
        self.next_bar += virtio_pci::BAR_SIZE;
        self.next_gsi += n32;
        Ok(interrupt)
    }
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
