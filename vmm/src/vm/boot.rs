//! The steps of [`Vm::boot`](super::Vm::boot), in order: a KVM VM, the
//! payload in guest RAM, the platform devices, the virtio devices, the
//! boot structures and ACPI tables that describe them, the vCPUs.

use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex};

use arch::layout;
use devices::legacy::{AcpiPmDevice, GedDevice, SerialDevice, I8042};
use devices::virtio::VirtioDevice;
use devices::IrqTrigger;
use kvm_bindings::{kvm_pit_config, KVM_MAX_CPUID_ENTRIES, KVM_PIT_SPEAKER_DUMMY};
use kvm_ioctls::{Kvm, VcpuFd, VmFd};
use vm_config::{ConsoleOutputMode, PayloadConfig, VmConfig};

use super::{VmError, VmEvents};
use crate::cpu::{VcpuContext, VcpuManager};
use crate::device_manager::DeviceManager;
use crate::memory::MemoryManager;

/// Device id of the balloon in `vm.counters` (Cloud Hypervisor's).
pub const BALLOON_ID: &str = "__balloon";
/// Device id of the entropy device in `vm.counters` (Cloud Hypervisor's).
pub const RNG_ID: &str = "__rng";

/// A VM with an in-kernel irqchip and PIT.
pub(super) fn create_vm(kvm: &Kvm) -> Result<VmFd, VmError> {
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
    Ok(vm_fd)
}

/// The kernel, command line and initramfs, loaded.
pub(super) struct Payload {
    pub loaded: arch::boot::LoadedKernel,
    pub cmdline_len: usize,
    pub initramfs: Option<(u64, u64)>,
}

/// Loads the payload into guest RAM. Done before any device touches the
/// host, so a bad kernel path fails first.
pub(super) fn load_payload(
    payload: &PayloadConfig,
    kernel: &std::path::Path,
    memory: &MemoryManager,
) -> Result<Payload, VmError> {
    let mem = memory.guest_memory();
    let loaded = arch::boot::load_kernel(mem, kernel)?;
    let cmdline = payload.cmdline.clone().unwrap_or_default();
    let cmdline_len = arch::boot::load_kernel_cmdline(mem, &cmdline)?;
    let ram = memory.ram_ranges();
    let initramfs = payload
        .initramfs
        .as_ref()
        .map(|p| arch::boot::load_initramfs(mem, p, &ram, loaded.end))
        .transpose()?;
    Ok(Payload {
        loaded,
        cmdline_len,
        initramfs,
    })
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

/// The platform devices on the I/O bus: COM1, the i8042 reset line, ACPI
/// power management and the generic event device.
pub(super) fn add_platform_devices(
    config: &VmConfig,
    vm_fd: &VmFd,
    events: &VmEvents,
    devices: &mut DeviceManager,
) -> Result<(), VmError> {
    let irq = |gsi: u32| -> Result<IrqTrigger, VmError> {
        let t = IrqTrigger::new().map_err(|e| VmError::Io("eventfd", e))?;
        vm_fd
            .register_irqfd(&t.0, gsi)
            .map_err(|e| VmError::Kvm("KVM_IRQFD", e))?;
        Ok(t)
    };
    let clone =
        |e: &vmm_sys_util::eventfd::EventFd| e.try_clone().map_err(|e| VmError::Io("eventfd", e));
    if let Some(out) = serial_output(config)? {
        let dev = Arc::new(Mutex::new(SerialDevice::new(irq(layout::COM1_IRQ)?, out)));
        crate::console::spawn_serial_watchdog(&dev);
        devices
            .io_bus_mut()
            .insert(dev.clone(), u64::from(layout::COM1_PORT), 8)
            .map_err(dev_err)?;
        devices.set_serial(dev);
    }
    let i8042 = I8042::new(IrqTrigger(clone(&events.reset)?));
    devices
        .io_bus_mut()
        .insert(Arc::new(Mutex::new(i8042)), 0x60, 5)
        .map_err(dev_err)?;
    let pm = AcpiPmDevice::new(clone(&events.poweroff)?, clone(&events.reset)?);
    devices
        .io_bus_mut()
        .insert(
            Arc::new(Mutex::new(pm)),
            u64::from(layout::ACPI_SLEEP_CONTROL_PORT),
            3,
        )
        .map_err(dev_err)?;
    let ged = Arc::new(Mutex::new(GedDevice::new(irq(layout::GED_IRQ)?)));
    devices
        .io_bus_mut()
        .insert(ged.clone(), u64::from(layout::GED_EVENT_PORT), 1)
        .map_err(dev_err)?;
    devices.set_ged(ged);
    Ok(())
}

/// The virtio devices the configuration names, in the order of their
/// MMIO windows (or PCI slots): balloon, entropy, console, disks, NICs.
pub(super) fn add_virtio_devices(
    config: &VmConfig,
    vm_fd: &Arc<VmFd>,
    memory: &MemoryManager,
    devices: &mut DeviceManager,
) -> Result<(), VmError> {
    if crate::virtio_pci::transport() == crate::virtio_pci::VirtioTransport::Pci {
        devices.enable_pci(vm_fd.clone())?;
    }
    let mem = memory.guest_memory();
    let attach = |devices: &mut DeviceManager, id: String, dev: Arc<Mutex<dyn VirtioDevice>>| {
        devices.attach_virtio(vm_fd, mem, id, dev)
    };
    if let Some(cfg) = &config.balloon {
        let dev = crate::balloon::create(config, cfg, memory)?;
        devices.set_balloon(dev.handle());
        attach(devices, BALLOON_ID.into(), Arc::new(Mutex::new(dev)))?;
    }
    let rng = devices::virtio::Rng::new(&config.rng.src).map_err(|e| {
        VmError::Config(format!(
            "--rng: cannot open {}: {e}",
            config.rng.src.display()
        ))
    })?;
    attach(devices, RNG_ID.into(), Arc::new(Mutex::new(rng)))?;
    if let Some(dev) = crate::io_devices::create_console(config)? {
        let id = crate::io_devices::CONSOLE_ID.to_owned();
        attach(devices, id, Arc::new(Mutex::new(dev)))?;
    }
    let (disk_ids, net_ids) = config.device_ids();
    for (id, cfg) in disk_ids.into_iter().zip(config.disks.iter().flatten()) {
        let (id, dev) = crate::io_devices::create_disk(id, cfg)?;
        attach(devices, id, Arc::new(Mutex::new(dev)))?;
    }
    for (id, cfg) in net_ids.into_iter().zip(config.net.iter().flatten()) {
        let (id, dev) = crate::io_devices::create_net(id, cfg)?;
        attach(devices, id, Arc::new(Mutex::new(dev)))?;
    }
    Ok(())
}

/// The zero page, MP/boot structures and ACPI tables (which describe the
/// virtio windows).
pub(super) fn write_boot_tables(
    config: &VmConfig,
    memory: &MemoryManager,
    devices: &DeviceManager,
    payload: &Payload,
) -> Result<(), VmError> {
    let mem = memory.guest_memory();
    arch::regs::write_boot_structures(mem)?;
    let mut acpi = super::acpi_config(config, memory, devices.mmio_descs());
    acpi.pci = devices.pci_host();
    arch::mptable::write_mptable(mem, acpi.vcpus.into(), acpi.max_vcpus.into())?;
    let smbios = arch::smbios::write_smbios(mem, &smbios_config(&config.platform)?)?;
    log::debug!("SMBIOS: {smbios} bytes of structures");
    let rsdp =
        arch::acpi::create_acpi_tables(mem, &acpi).map_err(|e| VmError::Acpi(e.to_string()))?;
    arch::boot::write_boot_params(
        mem,
        &arch::boot::BootParamsInput {
            setup_header: payload.loaded.setup_header,
            cmdline_len: payload.cmdline_len,
            initramfs: payload.initramfs,
            ram: &memory.ram_ranges(),
            rsdp,
        },
    )?;
    Ok(())
}

/// The guest's SMBIOS identity from `--platform` (validated with the rest
/// of the configuration, so the UUID parses here).
pub(super) fn smbios_config(
    p: &vm_config::PlatformConfig,
) -> Result<arch::smbios::SmbiosConfig, VmError> {
    Ok(arch::smbios::SmbiosConfig {
        manufacturer: p.system_manufacturer.clone(),
        product_name: p.system_product_name.clone(),
        version: p.system_version.clone(),
        serial_number: p.system_serial_number.clone(),
        uuid: p.uuid_bytes().map_err(|e| VmError::Config(e.to_string()))?,
        sku_number: p.system_sku_number.clone(),
        family: p.system_family.clone(),
        chassis_asset_tag: p.chassis_asset_tag.clone(),
        oem_strings: p.oem_strings.clone().unwrap_or_default(),
    })
}

/// Creates the boot vCPUs, the first one at the kernel's entry point.
fn create_vcpus(
    config: &VmConfig,
    kvm: &Kvm,
    vm_fd: &VmFd,
    entry: vm_memory::GuestAddress,
) -> Result<Vec<VcpuFd>, VmError> {
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
            arch::regs::setup_boot_vcpu(&fd, entry)?;
        }
        vcpus.push(fd);
    }
    Ok(vcpus)
}

/// Creates the vCPUs and starts their threads over the devices' buses.
pub(super) fn start_vcpus(
    config: &VmConfig,
    kvm: &Kvm,
    vm_fd: &VmFd,
    payload: &Payload,
    devices: &DeviceManager,
    events: &VmEvents,
) -> Result<VcpuManager, VmError> {
    let vcpus = create_vcpus(config, kvm, vm_fd, payload.loaded.entry)?;
    let affinity: Vec<(u8, Vec<usize>)> = config
        .cpus
        .affinity
        .iter()
        .flatten()
        .map(|a| (a.vcpu, a.host_cpus.clone()))
        .collect();
    let (io_bus, mmio_bus) = devices.buses();
    let ctx = Arc::new(VcpuContext { io_bus, mmio_bus });
    let exit_evt = events
        .vcpu_exit
        .try_clone()
        .map_err(|e| VmError::Io("eventfd", e))?;
    VcpuManager::start(vcpus, ctx, exit_evt, &affinity)
        .map_err(|e| VmError::Io("starting vCPU threads", e))
}

fn dev_err(e: devices::BusError) -> VmError {
    VmError::Device(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_config::{PlatformConfig, PLATFORM_OEM_STRINGS_MAX, PLATFORM_STRING_BYTES_MAX};

    /// What the configuration accepts is what the SMBIOS area holds.
    #[test]
    fn config_limits_are_the_smbios_limits() {
        assert_eq!(PLATFORM_STRING_BYTES_MAX, arch::smbios::MAX_STRING_BYTES);
        assert_eq!(PLATFORM_OEM_STRINGS_MAX, arch::smbios::MAX_OEM_STRINGS);
    }

    /// A `--platform` at every limit passes validation and its tables build.
    #[test]
    fn a_valid_platform_at_the_limits_builds() {
        let mut p = PlatformConfig::parse(
            "system_serial_number=ds=nocloud;s=http://10.0.0.1/,\
             system_uuid=4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6,system_manufacturer=M,\
             system_product_name=P,system_version=V,system_family=F,system_sku_number=S,\
             chassis_asset_tag=T",
        )
        .unwrap();
        let used: usize = p
            .strings()
            .iter()
            .filter(|(f, _)| *f != "system_uuid")
            .filter_map(|(_, s)| s.map(|s| s.len() + 1))
            .sum();
        let mut oem: Vec<String> = (0..PLATFORM_OEM_STRINGS_MAX - 1)
            .map(|i| format!("{i:03}"))
            .collect();
        let oem_used = oem.len() * 4;
        oem.push("x".repeat(PLATFORM_STRING_BYTES_MAX - used - oem_used - 1));
        p.oem_strings = Some(oem);
        p.validate().unwrap();
        let t = arch::smbios::build_smbios(&smbios_config(&p).unwrap()).unwrap();
        assert!(t.table.len() <= arch::smbios::MAX_TABLE_LEN);
        let serial = b"ds=nocloud;s=http://10.0.0.1/\0";
        assert!(t.table.windows(serial.len()).any(|w| w == serial));
    }
}
