//! The manager over a real KVM VM (irqfds and ioeventfds registered) and
//! the real entropy device, driven through the MMIO bus as a driver would.

use std::path::Path;

use devices::virtio::{status, Rng, VIRTIO_F_VERSION_1};
use kvm_ioctls::Kvm;
use vm_memory::{Bytes, GuestAddress};

use super::*;

const MEM: usize = 0x20_0000;
const WAIT: Duration = Duration::from_secs(10);

fn w(bus: &Bus, addr: u64, v: u32) {
    assert!(bus.write(addr, &v.to_le_bytes()), "write {addr:#x}");
}

fn r(bus: &Bus, addr: u64) -> u32 {
    let mut b = [0u8; 4];
    assert!(bus.read(addr, &mut b), "read {addr:#x}");
    u32::from_le_bytes(b)
}

fn handler_calls(dm: &DeviceManager) -> u64 {
    dm.counters()["__rng"]["thread_handler_calls"]
}

#[test]
fn a_paused_vm_has_quiet_devices_and_resume_delivers_the_work() {
    let Ok(kvm) = Kvm::new() else {
        eprintln!("NOT RUN: /dev/kvm cannot be opened here");
        return;
    };
    let vm_fd = kvm.create_vm().unwrap();
    vm_fd.create_irq_chip().unwrap();
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).unwrap();
    let mut dm = DeviceManager::default();
    let rng = Rng::new(Path::new("/dev/urandom")).unwrap();
    dm.attach_virtio(&vm_fd, &mem, "__rng".into(), Arc::new(Mutex::new(rng)))
        .unwrap();
    let base = dm.mmio_descs()[0].base;
    let (_, bus) = dm.buses();

    // The driver's side (virtio 1.2 section 2.7): one device-writable
    // 64-byte buffer in descriptor 0, made available in slot 0.
    const DESC: u64 = 0x1000;
    const AVAIL: u64 = 0x2000;
    const USED: u64 = 0x3000;
    const VRING_DESC_F_WRITE: u16 = 2;
    mem.write_obj(0x10_0000u64, GuestAddress(DESC)).unwrap();
    mem.write_obj(64u32, GuestAddress(DESC + 8)).unwrap();
    mem.write_obj(VRING_DESC_F_WRITE, GuestAddress(DESC + 12))
        .unwrap();
    mem.write_obj(0u16, GuestAddress(AVAIL + 4)).unwrap();
    mem.write_obj(1u16, GuestAddress(AVAIL + 2)).unwrap();
    let st = |v| status::ACKNOWLEDGE | status::DRIVER | v;
    w(&bus, base + 0x70, st(0));
    w(&bus, base + 0x24, 1);
    w(&bus, base + 0x20, 1 << (VIRTIO_F_VERSION_1 - 32));
    w(&bus, base + 0x70, st(status::FEATURES_OK));
    w(&bus, base + 0x38, 16);
    for (reg, a) in [(0x80, DESC), (0x90, AVAIL), (0xa0, USED)] {
        w(&bus, base + reg, a as u32);
        w(&bus, base + reg + 4, 0);
    }
    w(&bus, base + 0x44, 1);
    dm.pause().unwrap();
    // DRIVER_OK and a notification while paused: the thread takes the data
    // path but runs none of it.
    w(
        &bus,
        base + 0x70,
        st(status::FEATURES_OK | status::DRIVER_OK),
    );
    w(&bus, base + 0x50, 0);
    let used_idx = GuestAddress(USED + 2);
    // The parked thread still takes commands: the data path arrives.
    let deadline = std::time::Instant::now() + WAIT;
    while dm.counters()["__rng"]["thread_activations"] == 0 {
        assert!(std::time::Instant::now() < deadline, "never activated");
        std::thread::yield_now();
    }
    let before = dm.counters();
    // An observation window: nothing may happen in it.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        mem.read_obj::<u16>(used_idx).unwrap(),
        0,
        "used ring written"
    );
    assert_eq!(dm.counters(), before, "a counter moved while paused");
    assert_eq!(before["__rng"]["irq_signals"], 0);
    assert_eq!(handler_calls(&dm), 0);

    dm.resume().unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while mem.read_obj::<u16>(used_idx).unwrap() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "not served after resume"
        );
        std::thread::yield_now();
    }
    let deadline = std::time::Instant::now() + WAIT;
    while dm.counters()["__rng"]["irq_signals"] == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no interrupt after resume"
        );
        std::thread::yield_now();
    }
    assert_eq!(dm.counters()["__rng"]["requests"], 1);
    assert_eq!(r(&bus, base + 0x60) & 1, 1, "used-buffer interrupt status");
    assert!(handler_calls(&dm) >= 1);
}

#[test]
fn multiqueue_devices_need_virtio_pci_and_pause_with_all_their_threads() {
    use devices::virtio::{Block, DiskOptions};
    let Ok(kvm) = Kvm::new() else {
        eprintln!("NOT RUN: /dev/kvm cannot be opened here");
        return;
    };
    let vm_fd = Arc::new(kvm.create_vm().unwrap());
    vm_fd.create_irq_chip().unwrap();
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM)]).unwrap();
    let img = vmm_sys_util::tempfile::TempFile::new().unwrap();
    img.as_file().set_len(0x10000).unwrap();
    let block = || {
        let b = Block::new(DiskOptions {
            path: img.as_path().to_path_buf(),
            readonly: false,
            direct: false,
            serial: None,
            queue_size: 16,
            num_queues: 2,
        })
        .unwrap();
        Arc::new(Mutex::new(b))
    };
    let mut dm = DeviceManager::default();
    let e = dm
        .attach_virtio(&vm_fd, &mem, "_disk0".into(), block())
        .expect_err("a 2-queue disk on virtio-mmio");
    assert!(e.to_string().contains("--virtio-transport pci"), "{e}");
    dm.enable_pci(vm_fd.clone()).unwrap();
    dm.attach_virtio(&vm_fd, &mem, "_disk0".into(), block())
        .unwrap();
    assert_eq!(dm.virtio[0].workers.len(), 1, "one thread per queue");
    dm.pause().unwrap();
    assert!(dm.virtio[0].threads().all(|t| t.handle().is_paused()));
    dm.resume().unwrap();
}
