//! `--virtio-transport pci` with the real binary on this host's /dev/kvm:
//! a tiny guest enumerates the PCI bus through configuration mechanism #1
//! and ECAM, enables a function's memory decode, reads its common
//! configuration through BAR 0, enables MSI-X and unmasks a programmed
//! vector (the vCPU thread updates KVM's GSI routing under its seccomp
//! filter), prints what it read on COM1 and powers off.
//!
//! The guest runs at CPL0 with the VMM's identity page tables, so this
//! runs wherever /dev/kvm runs 64-bit code, PVM hosts included.

use std::fs;

use vmm_sys_util::tempdir::TempDir;

mod common;
use common::kernel;

/// The guest, assembled from (GNU as, AT&T syntax):
///
/// ```text
///     cli
///     xor %ebx,%ebx
/// 1:  mov %ebx,%eax ; shl $11,%eax ; or $0x80000000,%eax   # slot ebx, register 0
///     mov $0xcf8,%dx ; out %eax,(%dx) ; mov $0xcfc,%dx ; in (%dx),%eax ; call hex
///     inc %ebx ; cmp $3,%ebx ; jne 1b
///     mov $0xe0008000,%esi                                  # ECAM of 00:01.0
///     mov (%rsi),%eax ; call hex                            # IDs
///     mov 8(%rsi),%eax ; call hex                           # class, revision
///     movw $6,4(%rsi)                                       # memory decode, bus master
///     mov 0x10(%rsi),%eax ; call hex                        # BAR 0
///     mov %eax,%edi ; movzwl 0x12(%rdi),%eax ; call hex     # num_queues
///     movw $0x8000,0x86(%rsi)                               # MSI-X enable (cap at 0x84)
///     movl $0xfee00000,0x4000(%rdi) ; movl $0,0x4004(%rdi)  # vector 0: address,
///     movl $0x30,0x4008(%rdi) ; movl $0,0x400c(%rdi)        # data, unmask
///     mov 0x400c(%rdi),%eax ; call hex                      # vector control
///     mov $0x600,%dx ; mov $0x34,%al ; out %al,(%dx)        # ACPI S5
/// 2:  hlt ; jmp 2b
/// hex: print eax as 8 hex digits and a newline on port 0x3f8
/// ```
const GUEST: [u8; 196] = [
    0xfa, 0x31, 0xdb, 0x89, 0xd8, 0xc1, 0xe0, 0x0b, 0x0d, 0x00, 0x00, 0x00, 0x80, 0x66, 0xba, 0xf8,
    0x0c, 0xef, 0x66, 0xba, 0xfc, 0x0c, 0xed, 0xe8, 0x7a, 0x00, 0x00, 0x00, 0xff, 0xc3, 0x83, 0xfb,
    0x03, 0x75, 0xe0, 0xbe, 0x00, 0x80, 0x00, 0xe0, 0x8b, 0x06, 0xe8, 0x67, 0x00, 0x00, 0x00, 0x8b,
    0x46, 0x08, 0xe8, 0x5f, 0x00, 0x00, 0x00, 0x66, 0xc7, 0x46, 0x04, 0x06, 0x00, 0x8b, 0x46, 0x10,
    0xe8, 0x51, 0x00, 0x00, 0x00, 0x89, 0xc7, 0x0f, 0xb7, 0x47, 0x12, 0xe8, 0x46, 0x00, 0x00, 0x00,
    0x66, 0xc7, 0x86, 0x86, 0x00, 0x00, 0x00, 0x00, 0x80, 0xc7, 0x87, 0x00, 0x40, 0x00, 0x00, 0x00,
    0x00, 0xe0, 0xfe, 0xc7, 0x87, 0x04, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc7, 0x87, 0x08,
    0x40, 0x00, 0x00, 0x30, 0x00, 0x00, 0x00, 0xc7, 0x87, 0x0c, 0x40, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x8b, 0x87, 0x0c, 0x40, 0x00, 0x00, 0xe8, 0x0a, 0x00, 0x00, 0x00, 0x66, 0xba, 0x00, 0x06,
    0xb0, 0x34, 0xee, 0xf4, 0xeb, 0xfd, 0x50, 0x51, 0x41, 0x89, 0xc0, 0xb9, 0x08, 0x00, 0x00, 0x00,
    0x66, 0xba, 0xf8, 0x03, 0x41, 0xc1, 0xc0, 0x04, 0x44, 0x89, 0xc0, 0x83, 0xe0, 0x0f, 0x83, 0xf8,
    0x0a, 0x72, 0x03, 0x83, 0xc0, 0x27, 0x83, 0xc0, 0x30, 0xee, 0xff, 0xc9, 0x75, 0xe6, 0xb0, 0x0a,
    0xee, 0x59, 0x58, 0xc3,
];

#[test]
fn a_guest_enumerates_the_pci_bus_and_programs_msix_under_the_sandbox() {
    if !common::kvm_available() {
        eprintln!("skipped: no usable /dev/kvm");
        return;
    }
    let tmp = TempDir::new().expect("temp dir");
    let dir = tmp.as_path();
    let elf = dir.join("pci.elf");
    kernel(&elf, &GUEST);
    let disk = dir.join("disk.img");
    fs::write(&disk, vec![0u8; 1 << 20]).expect("disk");
    let serial = dir.join("serial.out");
    let stderr = dir.join("vmm.stderr");
    let status = common::run_pci_guest(&elf, &format!("path={}", disk.display()), &serial, &stderr);
    let log = fs::read_to_string(&stderr).unwrap_or_default();
    let out = fs::read_to_string(&serial).unwrap_or_default();
    assert!(status.success(), "VMM exit {status}; log: {log}");
    assert!(!log.contains("made a forbidden syscall"), "{log}");
    assert!(!log.contains("msix: routing"), "GSI routing failed: {log}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "0d578086", // 00:00.0 host bridge, through 0xcf8/0xcfc
            "10441af4", // 00:01.0 virtio-rng (the balloon is absent)
            "10421af4", // 00:02.0 virtio-blk
            "10441af4", // 00:01.0 through ECAM
            "ff000001", // class ff0000, revision 1
            "c0000000", // BAR 0 at the start of the PCI window
            "00000001", // num_queues of the entropy device
            "00000000", // vector 0 unmasked
        ],
        "log: {log}"
    );
}
