//! One virtual machine: KVM VM with in-kernel irqchip and PIT, guest RAM,
//! platform devices, the loaded payload, ACPI tables and vCPU threads.

mod boot;
pub mod hotplug;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arch::acpi::{AcpiConfig, NumaNodeDesc};
use arch::layout;
use demeter_balloon::BalloonHandle;
use devices::legacy::SerialDevice;
use devices::virtio_mem::VirtioMemHandle;
use kvm_ioctls::{Kvm, VmFd};
use vm_config::VmConfig;
use vmm_sys_util::eventfd::EventFd;

pub use boot::{BALLOON_ID, RNG_ID};

use crate::cpu::{VcpuExitReason, VcpuManager};
use crate::device_manager::DeviceManager;
use crate::memory::MemoryManager;

/// Errors while building or booting a VM.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A KVM ioctl failed.
    #[error("{0}: {1}")]
    Kvm(&'static str, kvm_ioctls::Error),
    /// Guest RAM could not be created.
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    /// The kernel, command line or initramfs could not be loaded.
    #[error(transparent)]
    Boot(#[from] arch::boot::BootError),
    /// ACPI table generation failed.
    #[error("ACPI tables: {0}")]
    Acpi(String),
    /// vCPU register setup failed.
    #[error(transparent)]
    Regs(#[from] arch::regs::RegsError),
    /// The MP table could not be written.
    #[error(transparent)]
    Mptable(#[from] arch::mptable::MptableError),
    /// The SMBIOS tables could not be built or written.
    #[error(transparent)]
    Smbios(#[from] arch::smbios::SmbiosError),
    /// A device could not be created or attached.
    #[error("device setup: {0}")]
    Device(String),
    /// The configuration names something this host cannot provide.
    #[error("{0}")]
    Config(String),
    /// The configuration has no payload.
    #[error("no kernel to boot (give --kernel or a payload in vm.create)")]
    NoPayload,
    /// I/O error (eventfds, threads, files).
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
}

/// Platform events the VMM waits on.
pub struct VmEvents {
    /// A vCPU ended (poweroff system event, reset, triple fault, error).
    pub vcpu_exit: EventFd,
    /// The guest entered S5 through the ACPI sleep control register.
    pub poweroff: EventFd,
    /// The guest asked for a reset (ACPI reset register or i8042).
    pub reset: EventFd,
}

impl VmEvents {
    fn new() -> Result<Self, VmError> {
        let new = || EventFd::new(libc::EFD_NONBLOCK).map_err(|e| VmError::Io("eventfd", e));
        Ok(Self {
            vcpu_exit: new()?,
            poweroff: new()?,
            reset: new()?,
        })
    }
}

/// A booted VM.
pub struct Vm {
    // Field order is drop order: vCPUs stop (Drop), then the device
    // threads, then guest memory goes away.
    vcpus: VcpuManager,
    devices: DeviceManager,
    /// The virtio-mem devices' handles, by zone id.
    virtio_mem: BTreeMap<String, VirtioMemHandle>,
    memory: MemoryManager,
    events: VmEvents,
    vm_fd: Arc<VmFd>,
}

impl Vm {
    /// Creates and boots a VM from a validated `config`.
    pub fn boot(config: &VmConfig) -> Result<Self, VmError> {
        let payload = config.payload.as_ref().ok_or(VmError::NoPayload)?;
        let kernel = payload.kernel.as_ref().ok_or(VmError::NoPayload)?;
        let kvm = Kvm::new().map_err(|e| VmError::Kvm("opening /dev/kvm", e))?;
        let vm_fd = Arc::new(boot::create_vm(&kvm)?);
        let memory = MemoryManager::new(config, &vm_fd)?;
        let events = VmEvents::new()?;
        let loaded = boot::load_payload(payload, kernel, &memory)?;
        let mut devices = DeviceManager::default();
        boot::add_platform_devices(config, &vm_fd, &events, &mut devices)?;
        boot::add_virtio_devices(config, &vm_fd, &memory, &mut devices)?;
        let virtio_mem = crate::virtio_mem::attach(config, &vm_fd, &memory, &mut devices)?;
        boot::write_boot_tables(config, &memory, &devices, &loaded)?;
        let vcpus = boot::start_vcpus(config, &kvm, &vm_fd, &loaded, &devices, &events)?;
        log::info!(
            "booted {} with {} vCPUs and {} MiB of RAM in {} zone(s)",
            kernel.display(),
            config.cpus.boot_vcpus,
            memory.ram_ranges().iter().map(|r| r.1).sum::<u64>() >> 20,
            memory.zones().len()
        );
        Ok(Self {
            vcpus,
            devices,
            virtio_mem,
            memory,
            events,
            vm_fd,
        })
    }

    /// The platform events to poll.
    pub fn events(&self) -> &VmEvents {
        &self.events
    }

    /// The first exit reason a vCPU reported.
    pub fn vcpu_exit_reason(&self) -> Option<VcpuExitReason> {
        self.vcpus.exit_reason()
    }

    /// The serial port, for host input.
    pub fn serial(&self) -> Option<&Arc<Mutex<SerialDevice>>> {
        self.devices.serial()
    }

    /// Guest RAM.
    pub fn memory(&self) -> &MemoryManager {
        &self.memory
    }

    /// Pauses the VM: vCPUs first, then the devices (their threads park
    /// and their interrupts are held back), so nothing touches guest
    /// memory or interrupts the guest until [`Vm::resume`].
    pub fn pause(&self) -> Result<(), String> {
        self.vcpus.pause()?;
        if let Err(e) = self.devices.pause() {
            self.vcpus.resume();
            return Err(e);
        }
        Ok(())
    }

    /// Resumes the devices (delivering interrupts held back), then the vCPUs.
    pub fn resume(&self) -> Result<(), String> {
        let devices = self.devices.resume();
        self.vcpus.resume();
        devices
    }

    /// Injects an NMI into every vCPU (`vm.nmi`).
    pub fn nmi(&self) {
        self.vcpus.nmi()
    }

    /// Presses the ACPI power button (the guest shuts itself down).
    pub fn power_button(&self) -> std::io::Result<()> {
        match self.devices.ged() {
            Some(ged) => ged
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .notify(layout::GED_EVENT_POWER_BUTTON),
            None => Err(std::io::Error::other("the VM has no generic event device")),
        }
    }

    /// Every virtio device's counters, by device id (`vm.counters`).
    pub fn counters(&self) -> BTreeMap<String, BTreeMap<String, u64>> {
        self.devices.counters()
    }

    /// The balloon's control handle, if the VM has a balloon.
    pub fn balloon(&self) -> Option<&BalloonHandle> {
        self.devices.balloon()
    }

    /// The virtio-mem device of memory zone `zone`, if it has one.
    pub fn virtio_mem(&self, zone: &str) -> Option<&VirtioMemHandle> {
        self.virtio_mem.get(zone)
    }

    /// Every virtio-mem device, by zone id.
    pub fn virtio_mem_devices(&self) -> &BTreeMap<String, VirtioMemHandle> {
        &self.virtio_mem
    }

    /// Stops the vCPUs and devices and releases guest memory.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // The device threads stop when `devices` is dropped, next.
        self.vcpus.shutdown();
    }
}

/// Translates the NUMA configuration into ACPI's terms.
fn acpi_config(
    config: &VmConfig,
    memory: &MemoryManager,
    virtio_mmio: Vec<arch::acpi::VirtioMmioDesc>,
) -> AcpiConfig {
    let numa = config
        .numa
        .iter()
        .flatten()
        .map(|n| NumaNodeDesc {
            proximity_domain: n.guest_numa_id,
            cpus: n.cpus.clone().unwrap_or_default(),
            memory: n
                .memory_zones
                .iter()
                .flatten()
                .filter_map(|id| memory.zone(id))
                .flat_map(|z| z.ranges.iter().map(|r| (r.gpa, r.len)))
                .collect(),
            hotplug_memory: n
                .memory_zones
                .iter()
                .flatten()
                .filter_map(|id| memory.zone(id)?.hotplug.as_ref())
                .map(|h| (h.gpa, h.size))
                .collect(),
            distances: n
                .distances
                .iter()
                .flatten()
                .map(|d| (d.destination, d.distance))
                .collect(),
            access_latency_ns: n.latency_ns,
            access_bandwidth_mbps: n.bandwidth_mbps,
        })
        // vCPUs not started at boot get no SRAT entry: they are only
        // possible CPUs in the MADT.
        .map(|mut n| {
            n.cpus.retain(|&c| c < config.cpus.boot_vcpus);
            n
        })
        .collect();
    AcpiConfig {
        vcpus: config.cpus.boot_vcpus,
        max_vcpus: config.cpus.max_vcpus,
        numa,
        virtio_mmio,
        pci: None,
    }
}
