//! Helpers shared by the VMM's integration tests.

use std::fs;
use std::path::Path;

/// An ELF64 "kernel" with `code` at 1 MiB, its entry.
pub fn kernel(path: &Path, code: &[u8]) {
    const ENTRY: u64 = 0x10_0000;
    const CODE_OFFSET: u64 = 0x1000;
    let len = code.len() as u64;
    let mut elf = Vec::new();
    elf.extend_from_slice(b"\x7fELF\x02\x01\x01\0");
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // x86-64
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&ENTRY.to_le_bytes());
    elf.extend_from_slice(&64u64.to_le_bytes()); // program headers
    elf.extend_from_slice(&0u64.to_le_bytes()); // no section headers
    elf.extend_from_slice(&0u32.to_le_bytes());
    for half in [64u16, 56, 1, 0, 0, 0] {
        elf.extend_from_slice(&half.to_le_bytes());
    }
    elf.extend_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    elf.extend_from_slice(&5u32.to_le_bytes()); // R+X
    for word in [CODE_OFFSET, ENTRY, ENTRY, len, len, 0x1000] {
        elf.extend_from_slice(&word.to_le_bytes());
    }
    elf.resize(CODE_OFFSET as usize, 0);
    elf.extend_from_slice(code);
    fs::write(path, elf).expect("write the kernel");
}
