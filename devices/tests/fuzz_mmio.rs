//! Property test of the virtio-mmio transport registers (the stable-Rust
//! stand-in for a cargo-fuzz target; `scripts/fuzz.sh` runs it longer):
//! random register reads and writes of every width, interleaved with the
//! driver's real initialisation sequence and resets, against the real
//! entropy device, whose data path its device thread takes and drops as
//! the guest activates and resets it. Nothing may panic, and the registers the spec fixes must
//! read as it says whatever came before.

use std::path::Path;
use std::sync::{Arc, Mutex};

use devices::event_loop::DeviceLoop;
use devices::virtio::{GuestMemoryMmap, MmioTransport, Rng};
use devices::{BusDevice, IrqTrigger};
use proptest::prelude::*;
use vm_memory::GuestAddress;

const MEM: u64 = 0x10_0000;
const MAGIC: u32 = 0x7472_6976;
const REG_MAGIC: u64 = 0x000;
const REG_DRIVER_FEATURES: u64 = 0x020;
const REG_DRIVER_FEATURES_SEL: u64 = 0x024;
const REG_QUEUE_SEL: u64 = 0x030;
const REG_QUEUE_NUM: u64 = 0x038;
const REG_QUEUE_READY: u64 = 0x044;
const REG_QUEUE_NOTIFY: u64 = 0x050;
const REG_STATUS: u64 = 0x070;
const REG_QUEUE_DESC_LOW: u64 = 0x080;
const REG_QUEUE_DRIVER_LOW: u64 = 0x090;
const REG_QUEUE_DEVICE_LOW: u64 = 0x0a0;
/// Every register the transport knows, and the config space.
const REGS: [u64; 27] = [
    0x000, 0x004, 0x008, 0x00c, 0x010, 0x014, 0x020, 0x024, 0x030, 0x034, 0x038, 0x044, 0x050,
    0x060, 0x064, 0x070, 0x080, 0x084, 0x090, 0x094, 0x0a0, 0x0a4, 0x0ac, 0x0b0, 0x0bc, 0x0fc,
    0x100,
];

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

#[derive(Debug, Clone)]
enum Op {
    Read(u64, usize),
    Write(u64, usize, u64),
    /// The driver's sequence up to DRIVER_OK, with queue 0 at these
    /// addresses and size.
    Init {
        num: u32,
        desc: u64,
        avail: u64,
        used: u64,
    },
    Reset,
}

fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![4 => prop::sample::select(REGS.to_vec()), 1 => 0u64..0x200, 1 => any::<u64>()]
}

fn width() -> impl Strategy<Value = usize> {
    prop_oneof![4 => Just(4usize), 1 => prop::sample::select(vec![0usize, 1, 2, 3, 8])]
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        2 => prop::sample::select(vec![0u64, 1, 3, 7, 11, 15, 0x80, 0xff, 16, 256, 1 << 32]),
        2 => 0u64..MEM,
        1 => any::<u64>(),
    ]
}

fn ring_addr() -> impl Strategy<Value = u64> {
    prop_oneof![3 => (0u64..MEM / 0x1000).prop_map(|p| p * 0x1000), 1 => any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (offset(), width()).prop_map(|(o, w)| Op::Read(o, w)),
        6 => (offset(), width(), value()).prop_map(|(o, w, v)| Op::Write(o, w, v)),
        2 => (
            prop_oneof![3 => Just(256u32), 1 => any::<u32>()],
            ring_addr(),
            ring_addr(),
            ring_addr(),
        )
            .prop_map(|(num, desc, avail, used)| Op::Init { num, desc, avail, used }),
        1 => Just(Op::Reset),
    ]
}

fn r32(t: &mut MmioTransport, off: u64) -> u32 {
    let mut b = [0u8; 4];
    t.read(off, &mut b);
    u32::from_le_bytes(b)
}

fn w32(t: &mut MmioTransport, off: u64, v: u32) {
    t.write(off, &v.to_le_bytes());
}

fn init(t: &mut MmioTransport, num: u32, desc: u64, avail: u64, used: u64) {
    w32(t, REG_STATUS, 0);
    w32(t, REG_STATUS, 1);
    w32(t, REG_STATUS, 3);
    w32(t, REG_DRIVER_FEATURES_SEL, 1);
    w32(t, REG_DRIVER_FEATURES, 1); // VIRTIO_F_VERSION_1
    w32(t, REG_DRIVER_FEATURES_SEL, 0);
    w32(t, REG_DRIVER_FEATURES, 0);
    w32(t, REG_STATUS, 11);
    w32(t, REG_QUEUE_SEL, 0);
    w32(t, REG_QUEUE_NUM, num);
    for (reg, a) in [
        (REG_QUEUE_DESC_LOW, desc),
        (REG_QUEUE_DRIVER_LOW, avail),
        (REG_QUEUE_DEVICE_LOW, used),
    ] {
        w32(t, reg, a as u32);
        w32(t, reg + 4, (a >> 32) as u32);
    }
    w32(t, REG_QUEUE_READY, 1);
    w32(t, REG_STATUS, 15);
    w32(t, REG_QUEUE_NOTIFY, 0);
}

fn run(ops: &[Op]) -> Result<(), TestCaseError> {
    let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MEM as usize)]).unwrap();
    let rng = Rng::new(Path::new("/dev/urandom")).unwrap();
    let device = Arc::new(Mutex::new(rng));
    let device_loop = DeviceLoop::spawn("virtio-rng").unwrap();
    let mut t = MmioTransport::new(
        device,
        mem,
        IrqTrigger::new().unwrap(),
        device_loop.handle(),
    )
    .unwrap();
    for op in ops {
        match *op {
            Op::Read(off, n) => {
                let mut b = vec![0u8; n];
                t.read(off, &mut b);
            }
            Op::Write(off, n, v) => {
                let b = v.to_le_bytes();
                t.write(off, &b[..n.min(8)]);
            }
            Op::Init {
                num,
                desc,
                avail,
                used,
            } => init(&mut t, num, desc, avail, used),
            Op::Reset => {
                w32(&mut t, REG_STATUS, 0);
                // As a driver does (section 2.4.1): the device thread may
                // take longer than the transport's bounded wait.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while r32(&mut t, REG_STATUS) != 0 {
                    prop_assert!(
                        std::time::Instant::now() < deadline,
                        "reset never completed"
                    );
                    std::thread::yield_now();
                }
                prop_assert!(!t.is_activated());
                w32(&mut t, REG_QUEUE_SEL, 0);
                prop_assert_eq!(r32(&mut t, REG_QUEUE_READY), 0);
            }
        }
        prop_assert_eq!(r32(&mut t, REG_MAGIC), MAGIC);
        if t.is_activated() {
            prop_assert_ne!(t.status() & 4, 0, "active without DRIVER_OK");
        }
    }
    if std::env::var_os("FUZZ_STATS").is_some() {
        eprintln!(
            "FUZZSTAT mmio ops={} activated={}",
            ops.len(),
            u8::from(t.is_activated())
        );
    }
    // Dropping the loop stops the device thread (the test would hang
    // otherwise).
    drop(t);
    drop(device_loop);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]
    #[test]
    fn fuzz_mmio_registers(ops in prop::collection::vec(op(), 1..40)) {
        run(&ops)?;
    }
}
