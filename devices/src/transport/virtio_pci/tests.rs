//! The virtio-pci function driven as Linux's virtio_pci_modern driver
//! drives it, plus hostile writes.

use super::*;
use crate::event_loop::DeviceLoop;
use crate::pci::MsiMessage;
use crate::virtio::{Rng, VirtioInterrupt};
use proptest::prelude::*;
use vm_memory::GuestAddress;

const BAR: u64 = 0xc000_0000;

#[derive(Default)]
struct Routes(Mutex<Vec<(u32, MsiMessage)>>);
impl MsiRouting for Routes {
    fn route(&self, gsi: u32, msg: MsiMessage) -> std::io::Result<()> {
        self.0.lock().unwrap().push((gsi, msg));
        Ok(())
    }
}

struct Fixture {
    dev: VirtioPciDevice,
    routes: Arc<Routes>,
    _loop: DeviceLoop,
}

fn fixture() -> Fixture {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x10_0000)]).unwrap();
    let rng = Rng::new(std::path::Path::new("/dev/urandom")).unwrap();
    let device: Arc<Mutex<dyn VirtioDevice>> = Arc::new(Mutex::new(rng));
    let n = vectors_for(&*device.lock().unwrap());
    let vectors = (0..n)
        .map(|i| MsixVector {
            gsi: 24 + i as u32,
            irq: EventFd::new(libc::EFD_NONBLOCK).unwrap(),
        })
        .collect();
    let lp = DeviceLoop::spawn("virtio-rng").unwrap();
    let routes = Arc::new(Routes::default());
    let dev = VirtioPciDevice::new(device, mem, lp.handle(), BAR, vectors, routes.clone()).unwrap();
    Fixture {
        dev,
        routes,
        _loop: lp,
    }
}

fn cfg_r(d: &mut VirtioPciDevice, off: u16, len: usize) -> u32 {
    let mut b = [0u8; 4];
    d.config_read(off, &mut b[..len]);
    u32::from_le_bytes(b)
}

fn cfg_w(d: &mut VirtioPciDevice, off: u16, len: usize, v: u32) {
    d.config_write(off, &v.to_le_bytes()[..len]);
}

fn bar_r(d: &mut VirtioPciDevice, off: u64, len: usize) -> u64 {
    let mut b = [0u8; 8];
    d.read(off, &mut b[..len]);
    u64::from_le_bytes(b)
}

fn bar_w(d: &mut VirtioPciDevice, off: u64, len: usize, v: u64) {
    d.write(off, &v.to_le_bytes()[..len]);
}

/// Walks the capability list: (offset, id, cfg_type for vendor caps).
fn caps(d: &mut VirtioPciDevice) -> Vec<(u16, u8, u8)> {
    let mut out = Vec::new();
    let mut ptr = cfg_r(d, 0x34, 1) as u16;
    while ptr != 0 && out.len() < 16 {
        let id = cfg_r(d, ptr, 1) as u8;
        out.push((ptr, id, cfg_r(d, ptr + 3, 1) as u8));
        ptr = cfg_r(d, ptr + 1, 1) as u16;
    }
    out
}

#[test]
fn identifies_as_a_modern_virtio_device_with_every_structure() {
    let mut f = fixture();
    let d = &mut f.dev;
    assert_eq!(cfg_r(d, 0, 2), 0x1af4);
    assert_eq!(cfg_r(d, 2, 2), 0x1044); // 0x1040 + entropy (4)
    assert_eq!(cfg_r(d, 8, 1), 1);
    assert_eq!(cfg_r(d, 0x2e, 2), 0x40);
    assert_eq!(cfg_r(d, 0x10, 4), BAR as u32);
    let list = caps(d);
    let vendor: Vec<u8> = list.iter().filter(|c| c.1 == 0x09).map(|c| c.2).collect();
    assert_eq!(vendor, vec![1, 3, 4, 2]);
    let (msix, _, _) = *list.iter().find(|c| c.1 == 0x11).expect("MSI-X capability");
    // Two vectors (one queue + config): table size field N-1.
    assert_eq!(cfg_r(d, msix + 2, 2) & 0x7ff, 1);
    assert_eq!(cfg_r(d, msix + 4, 4), MSIX_TABLE_OFFSET as u32);
    assert_eq!(cfg_r(d, msix + 8, 4), MSIX_PBA_OFFSET as u32);
    // The notify capability carries its multiplier.
    let (notify, _, _) = *list.iter().find(|c| c.2 == 2).unwrap();
    assert_eq!(cfg_r(d, notify + 16, 4), NOTIFY_MULTIPLIER as u32);
    assert_eq!(cfg_r(d, notify + 8, 4), NOTIFY_OFFSET as u32);
    // BAR sizing.
    cfg_w(d, 0x10, 4, u32::MAX);
    assert_eq!(cfg_r(d, 0x10, 4), !(BAR_SIZE as u32 - 1));
    cfg_w(d, 0x10, 4, BAR as u32);
    assert_eq!(d.bar(), BAR);
}

#[test]
fn linux_style_initialisation_activates_and_interrupts_through_msix() {
    let mut f = fixture();
    let d = &mut f.dev;
    // Memory decode off: the BAR answers all ones.
    assert_eq!(bar_r(d, 0x12, 2), 0xffff);
    cfg_w(d, 4, 2, 0x6);
    let msix = caps(d).iter().find(|c| c.1 == 0x11).unwrap().0;
    // MSI-X on with the function masked, entries programmed, then unmasked.
    cfg_w(d, msix + 2, 2, 0xc000);
    for v in 0..2u64 {
        bar_w(d, MSIX_TABLE_OFFSET + v * 16, 4, 0xfee0_0000);
        bar_w(d, MSIX_TABLE_OFFSET + v * 16 + 8, 4, 0x40 + v);
        bar_w(d, MSIX_TABLE_OFFSET + v * 16 + 12, 4, 0);
    }
    cfg_w(d, msix + 2, 2, 0x8000);
    assert_eq!(f.routes.0.lock().unwrap().len(), 2);

    bar_w(d, 0x14, 1, 0);
    assert_eq!(bar_r(d, 0x14, 1), 0);
    bar_w(d, 0x14, 1, 1 | 2); // ACKNOWLEDGE | DRIVER
    bar_w(d, 0x00, 4, 1);
    assert_eq!(bar_r(d, 0x04, 4), 1); // VERSION_1 in the high word
    bar_w(d, 0x08, 4, 1);
    bar_w(d, 0x0c, 4, 1);
    assert_eq!(bar_r(d, 0x0c, 4), 1);
    bar_w(d, 0x14, 1, 1 | 2 | 8); // FEATURES_OK
    assert_eq!(bar_r(d, 0x14, 1), 1 | 2 | 8);
    bar_w(d, 0x10, 2, 0);
    assert_eq!(bar_r(d, 0x10, 2), 0);
    assert_eq!(bar_r(d, 0x12, 2), 1); // num_queues
    bar_w(d, 0x16, 2, 0);
    assert_eq!(bar_r(d, 0x1c, 2), 0);
    let max = bar_r(d, 0x18, 2);
    assert!(max >= 64);
    assert_eq!(bar_r(d, 0x1e, 2), 0);
    bar_w(d, 0x18, 2, 64);
    assert_eq!(bar_r(d, 0x18, 2), 64);
    bar_w(d, 0x20, 4, 0x1000);
    bar_w(d, 0x24, 4, 0);
    bar_w(d, 0x28, 8, 0x2000);
    bar_w(d, 0x30, 4, 0x3000);
    bar_w(d, 0x34, 4, 0);
    assert_eq!(bar_r(d, 0x28, 8), 0x2000);
    assert_eq!(bar_r(d, 0x30, 4), 0x3000);
    bar_w(d, 0x1a, 2, 1);
    assert_eq!(bar_r(d, 0x1a, 2), 1);
    // A vector the table lacks reads back NO_VECTOR.
    bar_w(d, 0x1a, 2, 7);
    assert_eq!(bar_r(d, 0x1a, 2), u64::from(NO_VECTOR));
    bar_w(d, 0x1a, 2, 1);
    bar_w(d, 0x1c, 2, 1);
    bar_w(d, 0x14, 1, 1 | 2 | 8 | 4); // DRIVER_OK
    assert_eq!(bar_r(d, 0x14, 1), 1 | 2 | 8 | 4);

    // A queue interrupt goes to vector 1 and sets ISR bit 0 (read-to-clear).
    let irq = d.interrupt();
    irq.trigger(crate::virtio::VirtioInterruptType::Queue(0))
        .unwrap();
    assert_eq!(irq.signalled(), 1);
    assert_eq!(bar_r(d, ISR_OFFSET, 1), 1);
    assert_eq!(bar_r(d, ISR_OFFSET, 1), 0);
    // Masking vector 1 keeps the next one pending until unmasked.
    bar_w(d, MSIX_TABLE_OFFSET + 16 + 12, 4, 1);
    irq.trigger(crate::virtio::VirtioInterruptType::Queue(0))
        .unwrap();
    assert_eq!(irq.signalled(), 1);
    assert_eq!(bar_r(d, MSIX_PBA_OFFSET, 8), 0b10);
    bar_w(d, MSIX_TABLE_OFFSET + 16 + 12, 4, 0);
    assert_eq!(irq.signalled(), 2);
    // Configuration changes go to vector 0 and bump the generation.
    let generation = bar_r(d, 0x15, 1);
    irq.trigger(crate::virtio::VirtioInterruptType::Config)
        .unwrap();
    assert_eq!(irq.signalled(), 3);
    assert_eq!(bar_r(d, 0x15, 1), generation + 1);

    // Reset forgets the vectors and reads back 0 once done.
    bar_w(d, 0x14, 1, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while bar_r(d, 0x14, 1) != 0 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::yield_now();
    }
    assert_eq!(bar_r(d, 0x10, 2), u64::from(NO_VECTOR));
    bar_w(d, 0x16, 2, 0);
    assert_eq!(bar_r(d, 0x1a, 2), u64::from(NO_VECTOR));
}

#[test]
fn queue_setup_outside_the_window_is_refused_by_the_state_machine() {
    let mut f = fixture();
    let d = &mut f.dev;
    cfg_w(d, 4, 2, 0x2);
    // Before FEATURES_OK queue registers are locked.
    bar_w(d, 0x16, 2, 0);
    bar_w(d, 0x18, 2, 16);
    assert_ne!(bar_r(d, 0x18, 2), 16);
    // Wrong widths read zero and write nothing.
    assert_eq!(bar_r(d, 0x12, 4), 0);
    bar_w(d, 0x14, 4, 1);
    assert_eq!(bar_r(d, 0x14, 1), 0);
    // A queue select past the last queue reads size 0.
    bar_w(d, 0x16, 2, 9);
    assert_eq!(bar_r(d, 0x18, 2), 0);
    assert_eq!(bar_r(d, 0x1a, 2), u64::from(NO_VECTOR));
}

/// One guest access to the function: where, how wide, what value.
#[derive(Debug, Clone)]
enum GuestAccess {
    /// Config space at any offset, also past its end.
    Config { off: u16, len: usize, value: u64 },
    /// Memory and bus mastering on, as a driver sets them.
    EnableDecoding,
    /// BAR 0 at any offset, also past its end.
    Bar { off: u64, len: usize, value: u64 },
}

fn guest_access() -> impl Strategy<Value = GuestAccess> {
    let len = prop::sample::select(vec![1usize, 2, 3, 4, 8]);
    prop_oneof![
        1 => (0u16..0x1100, len.clone(), any::<u64>())
            .prop_map(|(off, len, value)| GuestAccess::Config { off, len, value }),
        1 => Just(GuestAccess::EnableDecoding),
        2 => (0..BAR_SIZE + 0x100, len, any::<u64>())
            .prop_map(|(off, len, value)| GuestAccess::Bar { off, len, value }),
    ]
}

proptest! {
    // FUZZ_CASES sequences (scripts/fuzz.sh pci), 64 under cargo test.
    #![proptest_config(ProptestConfig::with_cases(crate::virtio::fuzz_support::cases()))]
    #[test]
    fn fuzz_pci_guest_accesses(ops in prop::collection::vec(guest_access(), 1..400)) {
        let mut f = fixture();
        let d = &mut f.dev;
        for op in ops {
            match op {
                GuestAccess::Config { off, len, value } => {
                    let mut out = vec![0u8; len];
                    d.config_write(off, &value.to_le_bytes()[..len]);
                    d.config_read(off, &mut out);
                }
                GuestAccess::EnableDecoding => cfg_w(d, 4, 2, 0x6),
                GuestAccess::Bar { off, len, value } => {
                    let mut out = vec![0u8; len];
                    d.write(off, &value.to_le_bytes()[..len]);
                    d.read(off, &mut out);
                }
            }
        }
        // Whatever happened, the function still identifies itself.
        prop_assert_eq!(cfg_r(d, 0, 2), 0x1af4);
    }
}
