//! One virtual machine: KVM VM with in-kernel irqchip and PIT, guest RAM,
//! platform devices, the loaded payload, ACPI tables and vCPU threads.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

use arch::acpi::{AcpiConfig, NumaNodeDesc};
use arch::layout;
use demeter_balloon::BalloonHandle;
use devices::legacy::{AcpiPmDevice, GedDevice, SerialDevice, I8042};
use devices::virtio::VirtioDevice;
use devices::{Bus, IrqTrigger};
use kvm_bindings::{kvm_pit_config, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VmFd};
use vm_config::{ConsoleOutputMode, VmConfig};
use vmm_sys_util::eventfd::EventFd;

use crate::cpu::{VcpuContext, VcpuExitReason, VcpuManager};
use crate::memory::MemoryManager;
use crate::virtio_mmio::VirtioMmioDevices;

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
    // Field order is drop order: vCPUs stop before memory goes away; the
    // Drop impl also stops virtio device threads before that.
    vcpus: VcpuManager,
    virtio_devices: Vec<Arc<Mutex<dyn VirtioDevice>>>,
    balloon: Option<BalloonHandle>,
    rng_metrics: Arc<devices::virtio::rng::RngMetrics>,
    device_counters: Vec<(String, crate::io_devices::Counters)>,
    serial: Option<Arc<Mutex<SerialDevice>>>,
    ged: Arc<Mutex<GedDevice>>,
    memory: MemoryManager,
    events: VmEvents,
    _vm_fd: VmFd,
}

/// Where the serial port's output goes.
fn serial_output(config: &VmConfig) -> Result<Option<Box<dyn Write + Send>>, VmError> {
    Ok(match config.serial.mode {
        ConsoleOutputMode::Off => None,
        ConsoleOutputMode::Tty => Some(Box::new(crate::console::FlushingStdout)),
        ConsoleOutputMode::File => {
            let path = config
                .serial
                .file
                .as_ref()
                .ok_or_else(|| VmError::Device("--serial file= needs a path".into()))?;
            let f = File::create(path).map_err(|e| VmError::Io("opening serial output file", e))?;
            Some(Box::new(f))
        }
        _ => Some(Box::new(std::io::sink())),
    })
}

impl Vm {
    /// Creates and boots a VM from a validated `config`.
    pub fn boot(config: &VmConfig) -> Result<Self, VmError> {
        let payload = config.payload.as_ref().ok_or(VmError::NoPayload)?;
        let kernel = payload.kernel.as_ref().ok_or(VmError::NoPayload)?;
        let kvm = Kvm::new().map_err(|e| VmError::Kvm("opening /dev/kvm", e))?;
        let vm_fd = kvm
            .create_vm()
            .map_err(|e| VmError::Kvm("KVM_CREATE_VM", e))?;
        // The TSS and identity-map pages KVM needs sit just below the BIOS.
        vm_fd
            .set_identity_map_address(0xfffb_c000)
            .map_err(|e| VmError::Kvm("KVM_SET_IDENTITY_MAP_ADDR", e))?;
        vm_fd
            .set_tss_address(0xfffb_d000)
            .map_err(|e| VmError::Kvm("KVM_SET_TSS_ADDR", e))?;
        vm_fd
            .create_irq_chip()
            .map_err(|e| VmError::Kvm("KVM_CREATE_IRQCHIP", e))?;
        let pit = kvm_pit_config {
            flags: KVM_PIT_SPEAKER_DUMMY,
            ..Default::default()
        };
        vm_fd
            .create_pit2(pit)
            .map_err(|e| VmError::Kvm("KVM_CREATE_PIT2", e))?;

        let memory = MemoryManager::new(config, &vm_fd)?;
        let mem = memory.guest_memory();
        let events = VmEvents::new()?;

        // The payload first: a bad kernel path fails before any device
        // touches the host (TAP devices, disk images).
        let loaded = arch::boot::load_kernel(mem, kernel)?;
        let cmdline = payload.cmdline.clone().unwrap_or_default();
        let cmdline_len = arch::boot::load_kernel_cmdline(mem, &cmdline)?;
        let ram = memory.ram_ranges();
        let initramfs = payload
            .initramfs
            .as_ref()
            .map(|p| arch::boot::load_initramfs(mem, p, &ram, loaded.end))
            .transpose()?;

        // Platform devices on the I/O bus.
        let mut io_bus = Bus::new();
        let irq = |gsi: u32| -> Result<IrqTrigger, VmError> {
            let t = IrqTrigger::new().map_err(|e| VmError::Io("eventfd", e))?;
            vm_fd
                .register_irqfd(&t.0, gsi)
                .map_err(|e| VmError::Kvm("KVM_IRQFD", e))?;
            Ok(t)
        };
        let serial = match serial_output(config)? {
            Some(out) => {
                let dev = Arc::new(Mutex::new(SerialDevice::new(irq(layout::COM1_IRQ)?, out)));
                crate::console::spawn_serial_watchdog(&dev);
                io_bus
                    .insert(dev.clone(), u64::from(layout::COM1_PORT), 8)
                    .map_err(dev_err)?;
                Some(dev)
            }
            None => None,
        };
        let reset_trigger = IrqTrigger(
            events
                .reset
                .try_clone()
                .map_err(|e| VmError::Io("eventfd", e))?,
        );
        io_bus
            .insert(Arc::new(Mutex::new(I8042::new(reset_trigger))), 0x60, 5)
            .map_err(dev_err)?;
        let pm = AcpiPmDevice::new(
            events
                .poweroff
                .try_clone()
                .map_err(|e| VmError::Io("eventfd", e))?,
            events
                .reset
                .try_clone()
                .map_err(|e| VmError::Io("eventfd", e))?,
        );
        io_bus
            .insert(
                Arc::new(Mutex::new(pm)),
                u64::from(layout::ACPI_SLEEP_CONTROL_PORT),
                3,
            )
            .map_err(dev_err)?;
        let ged = Arc::new(Mutex::new(GedDevice::new(irq(layout::GED_IRQ)?)));
        io_bus
            .insert(ged.clone(), u64::from(layout::GED_EVENT_PORT), 1)
            .map_err(dev_err)?;

        // Virtio devices on the MMIO bus.
        let mut virtio = VirtioMmioDevices::default();
        let mut balloon = None;
        if let Some(cfg) = &config.balloon {
            let dev = crate::balloon::create(config, cfg, &memory)?;
            balloon = Some(dev.handle());
            virtio.add(&vm_fd, mem, Arc::new(Mutex::new(dev)))?;
        }
        let rng = devices::virtio::Rng::new(&config.rng.src).map_err(|e| {
            VmError::Config(format!(
                "--rng: cannot open {}: {e}",
                config.rng.src.display()
            ))
        })?;
        let rng_metrics = rng.metrics();
        virtio.add(&vm_fd, mem, Arc::new(Mutex::new(rng)))?;
        let mut device_counters = Vec::new();
        if let Some(dev) = crate::io_devices::create_console(config)? {
            let counters = crate::io_devices::Counters::Console(dev.metrics());
            virtio.add(&vm_fd, mem, Arc::new(Mutex::new(dev)))?;
            device_counters.push((crate::io_devices::CONSOLE_ID.to_owned(), counters));
        }
        let (disk_ids, net_ids) = config.device_ids();
        for (id, cfg) in disk_ids.into_iter().zip(config.disks.iter().flatten()) {
            let (id, dev) = crate::io_devices::create_disk(id, cfg)?;
            let counters = crate::io_devices::Counters::Block(dev.metrics());
            virtio.add(&vm_fd, mem, Arc::new(Mutex::new(dev)))?;
            device_counters.push((id, counters));
        }
        for (id, cfg) in net_ids.into_iter().zip(config.net.iter().flatten()) {
            let (id, dev) = crate::io_devices::create_net(id, cfg)?;
            let counters = crate::io_devices::Counters::Net(dev.metrics());
            virtio.add(&vm_fd, mem, Arc::new(Mutex::new(dev)))?;
            device_counters.push((id, counters));
        }
        let VirtioMmioDevices {
            bus: mmio_bus,
            devices: virtio_devices,
            descs: virtio_mmio,
            ..
        } = virtio;

        // Boot structures and ACPI tables (they describe the virtio windows).
        arch::regs::write_boot_structures(mem)?;
        let rsdp = arch::acpi::create_acpi_tables(mem, &acpi_config(config, &memory, virtio_mmio))
            .map_err(|e| VmError::Acpi(e.to_string()))?;
        arch::boot::write_boot_params(
            mem,
            &arch::boot::BootParamsInput {
                setup_header: loaded.setup_header,
                cmdline_len,
                initramfs,
                ram: &ram,
                rsdp,
            },
        )?;

        // vCPUs.
        let count = config.cpus.boot_vcpus;
        let base_cpuid = kvm
            .get_supported_cpuid(KVM_MAX_CPUID_ENTRIES)
            .map_err(|e| VmError::Kvm("KVM_GET_SUPPORTED_CPUID", e))?;
        let mut vcpus = Vec::new();
        for id in 0..count {
            let fd = vm_fd
                .create_vcpu(u64::from(id))
                .map_err(|e| VmError::Kvm("KVM_CREATE_VCPU", e))?;
            let mut cpuid = base_cpuid.clone();
            arch::cpuid::patch_cpuid(&mut cpuid, id, count);
            fd.set_cpuid2(&cpuid)
                .map_err(|e| VmError::Kvm("KVM_SET_CPUID2", e))?;
            arch::regs::setup_msrs(&fd)?;
            arch::regs::setup_fpu(&fd)?;
            arch::regs::setup_lint(&fd)?;
            if id == 0 {
                arch::regs::setup_boot_vcpu(&fd, loaded.entry)?;
            }
            vcpus.push(fd);
        }
        let affinity: Vec<(u8, Vec<usize>)> = config
            .cpus
            .affinity
            .iter()
            .flatten()
            .map(|a| (a.vcpu, a.host_cpus.clone()))
            .collect();
        let ctx = Arc::new(VcpuContext { io_bus, mmio_bus });
        let exit_evt = events
            .vcpu_exit
            .try_clone()
            .map_err(|e| VmError::Io("eventfd", e))?;
        let vcpus = VcpuManager::start(vcpus, ctx, exit_evt, &affinity)
            .map_err(|e| VmError::Io("starting vCPU threads", e))?;
        log::info!(
            "booted {} with {count} vCPUs and {} MiB of RAM in {} zone(s)",
            kernel.display(),
            ram.iter().map(|r| r.1).sum::<u64>() >> 20,
            memory.zones().len()
        );
        Ok(Self {
            vcpus,
            virtio_devices,
            balloon,
            rng_metrics,
            device_counters,
            serial,
            ged,
            memory,
            events,
            _vm_fd: vm_fd,
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
        self.serial.as_ref()
    }

    /// Guest RAM.
    pub fn memory(&self) -> &MemoryManager {
        &self.memory
    }

    /// Pauses all vCPUs.
    pub fn pause(&self) -> Result<(), String> {
        self.vcpus.pause()
    }

    /// Resumes all vCPUs.
    pub fn resume(&self) {
        self.vcpus.resume()
    }

    /// Injects an NMI into every vCPU (`vm.nmi`).
    pub fn nmi(&self) {
        self.vcpus.nmi()
    }

    /// Presses the ACPI power button (the guest shuts itself down).
    pub fn power_button(&self) -> std::io::Result<()> {
        self.ged
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .notify(layout::GED_EVENT_POWER_BUTTON)
    }

    /// The entropy device's counters.
    pub fn rng_counters(&self) -> std::collections::BTreeMap<String, u64> {
        self.rng_metrics
            .snapshot()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }

    /// Each disk's and NIC's counters, by device id.
    pub fn device_counters(
        &self,
    ) -> impl Iterator<Item = (String, std::collections::BTreeMap<String, u64>)> + '_ {
        self.device_counters
            .iter()
            .map(|(id, c)| (id.clone(), c.snapshot()))
    }

    /// The balloon's control handle, if the VM has a balloon.
    pub fn balloon(&self) -> Option<&BalloonHandle> {
        self.balloon.as_ref()
    }

    /// Stops the vCPUs and devices and releases guest memory.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.vcpus.shutdown();
        // Device threads hold guest memory; stop them before it is unmapped.
        for dev in &self.virtio_devices {
            if !dev.lock().unwrap_or_else(|p| p.into_inner()).reset() {
                log::warn!("a virtio device did not stop cleanly");
            }
        }
    }
}

fn dev_err(e: devices::BusError) -> VmError {
    VmError::Device(e.to_string())
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
    }
}
