//! Every device of a VM in one place: the platform devices on the I/O bus
//! and the virtio devices, each with its transport, its counters and its
//! device thread.
//!
//! A virtio device is attached once, when the VM is built (on the VMM
//! thread): the manager starts its [`DeviceLoop`] (named by
//! [`VirtioDevice::thread_name`], which picks the thread's seccomp
//! filter), puts a transport in front of it and keeps all three. The
//! guest's activation and reset then only send messages to that thread;
//! [`DeviceManager::pause`] parks every thread and holds back every
//! interrupt, so a paused VM sees no device write its memory and gets no
//! interrupt until [`DeviceManager::resume`].
//!
//! Transports are behind [`Transport`]: the device models never see which
//! one carries them. virtio-mmio is the default; after
//! [`DeviceManager::enable_pci`] every virtio device goes on the PCI root
//! bus instead (`crate::virtio_pci`), and can be hot-plugged and unplugged
//! while the guest runs (`hotplug.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arch::acpi::{PciHostDesc, VirtioMmioDesc};
use demeter_balloon::BalloonHandle;
use devices::event_loop::DeviceLoop;
use devices::legacy::{GedDevice, SerialDevice};
use devices::transport::virtio_pci::PciInterrupt;
use devices::virtio::{DeviceCounters, GuestMemoryMmap, MmioInterrupt, VirtioDevice};
use devices::Bus;
use kvm_ioctls::VmFd;

use crate::virtio_mmio::VirtioMmioAllocator;
use crate::virtio_pci::{PciAttachment, PciSegment};
use crate::vm::VmError;

/// How long [`DeviceManager::pause`] waits for one device thread to park:
/// a thread parks between two handler calls, each bounded by its device
/// (a block batch is at most `BATCH_BYTES` of I/O).
pub const DEVICE_PAUSE_WAIT: Duration = Duration::from_secs(2);

/// What the manager needs from a transport, whichever it is.
pub trait Transport: Send + Sync {
    /// Holds interrupts back (recorded, not signalled).
    fn hold_interrupts(&self);
    /// Signals what was held back and lets interrupts through again.
    fn release_interrupts(&self) -> std::io::Result<()>;
    /// How many times the transport signalled the guest.
    fn interrupts(&self) -> u64;
}

impl Transport for MmioInterrupt {
    fn hold_interrupts(&self) {
        self.pause();
    }
    fn release_interrupts(&self) -> std::io::Result<()> {
        self.resume()
    }
    fn interrupts(&self) -> u64 {
        self.signalled()
    }
}

impl Transport for PciInterrupt {
    fn hold_interrupts(&self) {
        self.hold();
    }
    fn release_interrupts(&self) -> std::io::Result<()> {
        self.release()
    }
    fn interrupts(&self) -> u64 {
        self.signalled()
    }
}

/// One virtio device and what belongs to it.
struct VirtioSlot {
    id: String,
    counters: Arc<dyn DeviceCounters>,
    transport: Arc<dyn Transport>,
    /// Its place on the PCI bus and KVM wiring, on virtio-pci.
    pci: Option<PciAttachment>,
    /// The device thread; dropping it stops the thread.
    thread: DeviceLoop,
    /// The other threads of a multiqueue device (one per queue or pair).
    workers: Vec<DeviceLoop>,
}

impl VirtioSlot {
    /// Every thread of the device, the first one first.
    fn threads(&self) -> impl Iterator<Item = &DeviceLoop> {
        std::iter::once(&self.thread).chain(&self.workers)
    }
}

/// The VM's devices.
#[derive(Default)]
pub struct DeviceManager {
    io_bus: Bus,
    mmio_bus: Bus,
    virtio: Vec<VirtioSlot>,
    mmio_alloc: VirtioMmioAllocator,
    mmio_descs: Vec<VirtioMmioDesc>,
    /// The PCI root bus, when virtio devices go on PCI.
    pci: Option<PciSegment>,
    serial: Option<Arc<Mutex<SerialDevice>>>,
    ged: Option<Arc<Mutex<GedDevice>>>,
    balloon: Option<BalloonHandle>,
}

impl DeviceManager {
    /// The port I/O bus, to add platform devices.
    pub fn io_bus_mut(&mut self) -> &mut Bus {
        &mut self.io_bus
    }

    /// Both buses, for the vCPUs: `(io, mmio)`.
    pub fn buses(&self) -> (Bus, Bus) {
        (self.io_bus.clone(), self.mmio_bus.clone())
    }

    /// Keeps the serial port (host input goes to it).
    pub fn set_serial(&mut self, serial: Arc<Mutex<SerialDevice>>) {
        self.serial = Some(serial);
    }

    /// Keeps the generic event device (the ACPI power button).
    pub fn set_ged(&mut self, ged: Arc<Mutex<GedDevice>>) {
        self.ged = Some(ged);
    }

    /// Keeps the balloon's control handle (its device is attached with
    /// [`DeviceManager::attach_virtio`] like any other).
    pub fn set_balloon(&mut self, balloon: BalloonHandle) {
        self.balloon = Some(balloon);
    }

    /// The serial port.
    pub fn serial(&self) -> Option<&Arc<Mutex<SerialDevice>>> {
        self.serial.as_ref()
    }

    /// The generic event device.
    pub fn ged(&self) -> Option<&Arc<Mutex<GedDevice>>> {
        self.ged.as_ref()
    }

    /// The balloon's control handle.
    pub fn balloon(&self) -> Option<&BalloonHandle> {
        self.balloon.as_ref()
    }

    /// Puts a PCI root bus in the VM (ECAM, configuration ports); virtio
    /// devices attached from now on are virtio-pci functions on it.
    pub fn enable_pci(&mut self, vm_fd: Arc<VmFd>) -> Result<(), VmError> {
        if self.pci.is_none() {
            self.pci = Some(PciSegment::new(
                vm_fd,
                &mut self.io_bus,
                &mut self.mmio_bus,
            )?);
        }
        Ok(())
    }

    /// What the MCFG table and the DSDT's host bridge describe, with PCI.
    pub fn pci_host(&self) -> Option<PciHostDesc> {
        self.pci.as_ref().map(PciSegment::host_desc)
    }

    /// What the DSDT must describe: every virtio-mmio window.
    pub fn mmio_descs(&self) -> Vec<VirtioMmioDesc> {
        self.mmio_descs.clone()
    }

    /// Attaches `device` as `id` behind a virtio-mmio window, or as a
    /// virtio-pci function once [`DeviceManager::enable_pci`] was called:
    /// starts its device thread (here, on the VMM thread, confined by its
    /// own filter), wires the transport into KVM and keeps everything.
    pub fn attach_virtio(
        &mut self,
        vm_fd: &VmFd,
        mem: &GuestMemoryMmap,
        id: String,
        device: Arc<Mutex<dyn VirtioDevice>>,
    ) -> Result<(), VmError> {
        let (name, counters, threads) = {
            let d = device.lock().unwrap_or_else(|p| p.into_inner());
            (d.thread_name(), d.counters(), d.worker_count().max(1))
        };
        if threads > 1 && self.pci.is_none() {
            // One GSI per virtio-mmio window: the queues could not interrupt
            // separately, and Linux's virtio_mmio gives them one vector.
            return Err(VmError::Config(format!(
                "{id}: {threads} queues (num_queues) need MSI-X: use --virtio-transport pci"
            )));
        }
        let spawn =
            || DeviceLoop::spawn(name).map_err(|e| VmError::Io("starting a device thread", e));
        let thread = spawn()?;
        let workers = (1..threads)
            .map(|_| spawn())
            .collect::<Result<Vec<_>, _>>()?;
        let handle = thread
            .handle()
            .with_workers(workers.iter().map(DeviceLoop::handle).collect());
        let mut pci_slot = None;
        let transport: Arc<dyn Transport> = match &mut self.pci {
            Some(pci) => {
                let (interrupt, attachment) = pci.attach(vm_fd, mem, device, handle)?;
                pci_slot = Some(attachment);
                interrupt
            }
            None => {
                let (desc, interrupt) = crate::virtio_mmio::attach(
                    vm_fd,
                    &mut self.mmio_bus,
                    &mut self.mmio_alloc,
                    mem,
                    device,
                    thread.handle(),
                )?;
                self.mmio_descs.push(desc);
                interrupt
            }
        };
        self.virtio.push(VirtioSlot {
            id,
            counters,
            transport,
            pci: pci_slot,
            thread,
            workers,
        });
        Ok(())
    }

    /// Quiesces every virtio device: interrupts are held back, then each
    /// device thread parks (no guest-memory access, no interrupt) before
    /// this returns. On failure the devices already paused are resumed.
    pub fn pause(&self) -> Result<(), String> {
        for (n, slot) in self.virtio.iter().enumerate() {
            slot.transport.hold_interrupts();
            for thread in slot.threads() {
                if let Err(e) = thread.handle().pause(DEVICE_PAUSE_WAIT) {
                    let undo = self.resume_first(n + 1).err().unwrap_or_default();
                    return Err(format!("device {} did not pause: {e} {undo}", slot.id));
                }
            }
        }
        Ok(())
    }

    /// Lets every virtio device run again and delivers the interrupts held
    /// back while paused.
    pub fn resume(&self) -> Result<(), String> {
        self.resume_first(self.virtio.len())
    }

    fn resume_first(&self, n: usize) -> Result<(), String> {
        let mut errors = Vec::new();
        for slot in &self.virtio[..n] {
            for thread in slot.threads() {
                if let Err(e) = thread.handle().resume() {
                    errors.push(format!("{}: {e}", slot.id));
                }
            }
            if let Err(e) = slot.transport.release_interrupts() {
                errors.push(format!("{}: {e}", slot.id));
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!("resuming devices: {}", errors.join("; ")))
        }
    }

    /// `vm.counters`: each virtio device's own counters plus what the
    /// manager sees of it (interrupts signalled, calls into its data path,
    /// activations and resets carried out by its thread), by device id.
    pub fn counters(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.virtio
            .iter()
            .map(|slot| {
                let mut c = slot.counters.snapshot();
                c.insert("irq_signals".into(), slot.transport.interrupts());
                for (k, v) in slot.thread.handle().counters() {
                    c.insert(format!("thread_{k}"), v);
                }
                // A multiqueue device's threads are activated and reset
                // together; their handler calls add up.
                let calls: u64 = slot
                    .workers
                    .iter()
                    .flat_map(|w| w.handle().counters())
                    .filter(|(k, _)| *k == "handler_calls")
                    .map(|(_, v)| v)
                    .sum();
                *c.entry("thread_handler_calls".into()).or_default() += calls;
                (slot.id.clone(), c)
            })
            .collect()
    }
}

pub mod hotplug;
#[cfg(test)]
mod tests;
