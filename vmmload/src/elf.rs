//! A small, defensive ELF64 parser for x86-64 executables.
//!
//! Only what loading a program needs: the file header, the program headers,
//! the `PT_INTERP` path. Every offset and size is checked against the file
//! length before use, so arbitrary bytes give an error, never a panic.

use thiserror::Error;

/// Errors from parsing an ELF image.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ElfError {
    /// The file is shorter than an ELF header.
    #[error("file too short to be an ELF executable ({0} bytes)")]
    TooShort(usize),
    /// The magic number is missing.
    #[error("not an ELF file (bad magic)")]
    BadMagic,
    /// Not a 64-bit little-endian x86-64 image.
    #[error("wrong architecture: {0} (only x86-64 ELF64 little-endian is supported)")]
    WrongArch(String),
    /// Neither an executable nor a position-independent executable.
    #[error("unsupported ELF type {0} (need ET_EXEC or ET_DYN)")]
    BadType(u16),
    /// The header is internally inconsistent.
    #[error("corrupt ELF header: {0}")]
    Corrupt(String),
}

/// `PT_LOAD` program header type.
pub const PT_LOAD: u32 = 1;
/// `PT_INTERP` program header type.
pub const PT_INTERP: u32 = 3;
/// `PT_PHDR` program header type.
pub const PT_PHDR: u32 = 6;
/// Segment is executable.
pub const PF_X: u32 = 1;
/// Segment is writable.
pub const PF_W: u32 = 2;
/// Segment is readable.
pub const PF_R: u32 = 4;
/// `ET_EXEC`: fixed-address executable.
pub const ET_EXEC: u16 = 2;
/// `ET_DYN`: position-independent executable or shared object.
pub const ET_DYN: u16 = 3;

/// Size of one ELF64 program header.
pub const PHDR_SIZE: usize = 56;
/// Largest address a user segment may reach (the x86-64 user half).
pub const USER_LIMIT: u64 = 0x7fff_ffff_f000;
/// Most program headers we accept (Linux uses a 64 KiB limit on the table).
const MAX_PHNUM: usize = 65536 / PHDR_SIZE;

/// One program header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramHeader {
    /// Segment type (`PT_*`).
    pub p_type: u32,
    /// Segment flags (`PF_*`).
    pub flags: u32,
    /// Offset of the segment in the file.
    pub offset: u64,
    /// Virtual address of the segment.
    pub vaddr: u64,
    /// Bytes of the segment in the file.
    pub filesz: u64,
    /// Bytes of the segment in memory.
    pub memsz: u64,
    /// Alignment.
    pub align: u64,
}

/// A parsed ELF image.
#[derive(Debug, Clone)]
pub struct Elf {
    /// `ET_EXEC` or `ET_DYN`.
    pub e_type: u16,
    /// Entry point (before relocation for `ET_DYN`).
    pub entry: u64,
    /// File offset of the program header table.
    pub phoff: u64,
    /// Program headers.
    pub phdrs: Vec<ProgramHeader>,
    /// Path of the requested interpreter, if any.
    pub interp: Option<String>,
}

fn rd16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

fn rd32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

fn rd64(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}

fn corrupt(msg: impl Into<String>) -> ElfError {
    ElfError::Corrupt(msg.into())
}

impl Elf {
    /// Parses and validates an ELF image held in `data`.
    pub fn parse(data: &[u8]) -> Result<Elf, ElfError> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            if data.len() < 4 {
                return Err(ElfError::TooShort(data.len()));
            }
            return Err(ElfError::BadMagic);
        }
        if data.len() < 64 {
            return Err(ElfError::TooShort(data.len()));
        }
        if data[4] != 2 {
            return Err(ElfError::WrongArch(format!(
                "ELF class {} (not ELF64)",
                data[4]
            )));
        }
        if data[5] != 1 {
            return Err(ElfError::WrongArch("big-endian".into()));
        }
        let machine = rd16(data, 18);
        if machine != 62 {
            return Err(ElfError::WrongArch(format!("e_machine {machine}")));
        }
        let e_type = rd16(data, 16);
        if e_type != ET_EXEC && e_type != ET_DYN {
            return Err(ElfError::BadType(e_type));
        }
        let entry = rd64(data, 24);
        let phoff = rd64(data, 32);
        let phentsize = rd16(data, 54) as usize;
        let phnum = rd16(data, 56) as usize;
        if phentsize != PHDR_SIZE {
            return Err(corrupt(format!("e_phentsize {phentsize} != {PHDR_SIZE}")));
        }
        if phnum == 0 || phnum > MAX_PHNUM {
            return Err(corrupt(format!("e_phnum {phnum}")));
        }
        let table_end = phoff
            .checked_add((phnum * PHDR_SIZE) as u64)
            .filter(|&e| e <= data.len() as u64)
            .ok_or_else(|| corrupt("program header table outside the file"))?;
        let mut phdrs = Vec::with_capacity(phnum);
        for i in 0..phnum {
            let o = phoff as usize + i * PHDR_SIZE;
            debug_assert!(o + PHDR_SIZE <= table_end as usize);
            let ph = ProgramHeader {
                p_type: rd32(data, o),
                flags: rd32(data, o + 4),
                offset: rd64(data, o + 8),
                vaddr: rd64(data, o + 16),
                filesz: rd64(data, o + 32),
                memsz: rd64(data, o + 40),
                align: rd64(data, o + 48),
            };
            phdrs.push(ph);
        }
        let mut interp = None;
        let mut nload = 0;
        for ph in &phdrs {
            match ph.p_type {
                PT_LOAD => {
                    nload += 1;
                    Self::check_load(ph, data.len() as u64)?;
                }
                PT_INTERP => {
                    let end = ph
                        .offset
                        .checked_add(ph.filesz)
                        .filter(|&e| e <= data.len() as u64)
                        .ok_or_else(|| corrupt("PT_INTERP outside the file"))?;
                    if ph.filesz < 2 || ph.filesz > 4096 {
                        return Err(corrupt(format!("PT_INTERP size {}", ph.filesz)));
                    }
                    let raw = &data[ph.offset as usize..end as usize];
                    let s = raw.split(|&c| c == 0).next().unwrap_or(&[]);
                    let path =
                        std::str::from_utf8(s).map_err(|_| corrupt("PT_INTERP is not UTF-8"))?;
                    if path.is_empty() {
                        return Err(corrupt("empty PT_INTERP"));
                    }
                    interp = Some(path.to_string());
                }
                _ => {}
            }
        }
        if nload == 0 {
            return Err(corrupt("no PT_LOAD segment"));
        }
        Ok(Elf {
            e_type,
            entry,
            phoff,
            phdrs,
            interp,
        })
    }

    fn check_load(ph: &ProgramHeader, file_len: u64) -> Result<(), ElfError> {
        if ph.filesz > ph.memsz {
            return Err(corrupt(format!(
                "segment at {:#x}: p_filesz {:#x} > p_memsz {:#x}",
                ph.vaddr, ph.filesz, ph.memsz
            )));
        }
        let fend = ph.offset.checked_add(ph.filesz);
        if fend.is_none_or(|e| e > file_len) {
            return Err(corrupt(format!(
                "segment at {:#x} reaches past the end of the file",
                ph.vaddr
            )));
        }
        let vend = ph.vaddr.checked_add(ph.memsz);
        if vend.is_none_or(|e| e > USER_LIMIT) {
            return Err(corrupt(format!(
                "segment at {:#x} size {:#x} outside the user address space",
                ph.vaddr, ph.memsz
            )));
        }
        if ph.vaddr % 4096 != ph.offset % 4096 {
            return Err(corrupt(format!(
                "segment at {:#x}: address and file offset differ modulo the page size",
                ph.vaddr
            )));
        }
        Ok(())
    }

    /// Loadable segments.
    pub fn loads(&self) -> impl Iterator<Item = &ProgramHeader> {
        self.phdrs.iter().filter(|p| p.p_type == PT_LOAD)
    }

    /// Page-aligned `[lowest, highest)` virtual range of the loadable segments.
    pub fn span(&self) -> (u64, u64) {
        let lo = self.loads().map(|p| p.vaddr & !0xfff).min().unwrap_or(0);
        let hi = self
            .loads()
            .map(|p| (p.vaddr + p.memsz + 0xfff) & !0xfff)
            .max()
            .unwrap_or(0);
        (lo, hi)
    }

    /// Virtual address (before relocation) of the program header table in memory.
    pub fn phdr_vaddr(&self) -> Option<u64> {
        if let Some(p) = self.phdrs.iter().find(|p| p.p_type == PT_PHDR) {
            return Some(p.vaddr);
        }
        self.loads()
            .find(|p| p.offset <= self.phoff && self.phoff < p.offset + p.filesz)
            .map(|p| p.vaddr + (self.phoff - p.offset))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds a minimal valid static executable image with one PT_LOAD.
    pub(crate) fn tiny_elf() -> Vec<u8> {
        let mut d = vec![0u8; 0x1000];
        d[..4].copy_from_slice(b"\x7fELF");
        d[4] = 2;
        d[5] = 1;
        d[6] = 1;
        d[16..18].copy_from_slice(&ET_EXEC.to_le_bytes());
        d[18..20].copy_from_slice(&62u16.to_le_bytes());
        d[24..32].copy_from_slice(&0x400078u64.to_le_bytes());
        d[32..40].copy_from_slice(&64u64.to_le_bytes());
        d[54..56].copy_from_slice(&(PHDR_SIZE as u16).to_le_bytes());
        d[56..58].copy_from_slice(&1u16.to_le_bytes());
        let o = 64;
        d[o..o + 4].copy_from_slice(&PT_LOAD.to_le_bytes());
        d[o + 4..o + 8].copy_from_slice(&(PF_R | PF_X).to_le_bytes());
        d[o + 16..o + 24].copy_from_slice(&0x400000u64.to_le_bytes());
        d[o + 32..o + 40].copy_from_slice(&0x1000u64.to_le_bytes());
        d[o + 40..o + 48].copy_from_slice(&0x1000u64.to_le_bytes());
        d
    }

    #[test]
    fn parses_minimal_static_executable() {
        let e = Elf::parse(&tiny_elf()).unwrap();
        assert_eq!(e.e_type, ET_EXEC);
        assert_eq!(e.entry, 0x400078);
        assert_eq!(e.span(), (0x400000, 0x401000));
        assert_eq!(e.phdr_vaddr(), Some(0x400040));
        assert!(e.interp.is_none());
    }

    #[test]
    fn rejects_non_elf_and_short_files() {
        assert_eq!(Elf::parse(b"#!/bin/sh\n").unwrap_err(), ElfError::BadMagic);
        assert_eq!(Elf::parse(b"\x7fEL").unwrap_err(), ElfError::TooShort(3));
        assert_eq!(
            Elf::parse(&tiny_elf()[..40]).unwrap_err(),
            ElfError::TooShort(40)
        );
    }

    #[test]
    fn rejects_wrong_architecture() {
        let mut d = tiny_elf();
        d[18] = 183; // aarch64
        assert!(matches!(Elf::parse(&d), Err(ElfError::WrongArch(_))));
        let mut d = tiny_elf();
        d[4] = 1; // ELF32
        assert!(matches!(Elf::parse(&d), Err(ElfError::WrongArch(_))));
    }

    #[test]
    fn rejects_segment_past_end_of_file_and_absurd_sizes() {
        let mut d = tiny_elf();
        d[64 + 32..64 + 40].copy_from_slice(&0x10_0000u64.to_le_bytes());
        d[64 + 40..64 + 48].copy_from_slice(&0x10_0000u64.to_le_bytes());
        assert!(matches!(Elf::parse(&d), Err(ElfError::Corrupt(_))));
        let mut d = tiny_elf();
        d[64 + 40..64 + 48].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Elf::parse(&d), Err(ElfError::Corrupt(_))));
        let mut d = tiny_elf();
        d[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
        assert!(matches!(Elf::parse(&d), Err(ElfError::Corrupt(_))));
        let mut d = tiny_elf();
        d[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(Elf::parse(&d), Err(ElfError::Corrupt(_))));
    }

    /// Deterministic fuzzing: random byte flips and truncations of a valid
    /// image must give `Ok` or `Err`, never a panic, and an `Ok` result must
    /// respect the invariants the loader relies on.
    #[test]
    fn fuzz_mutated_images_never_panic() {
        let base = tiny_elf();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20000 {
            let mut d = base.clone();
            let flips = next() % 8 + 1;
            for _ in 0..flips {
                let at = (next() % 200) as usize;
                d[at] = next() as u8;
            }
            let cut = (next() % (d.len() as u64 + 1)) as usize;
            if next() % 4 == 0 {
                d.truncate(cut);
            }
            if let Ok(e) = Elf::parse(&d) {
                for p in e.loads() {
                    assert!(p.filesz <= p.memsz);
                    assert!(p.offset + p.filesz <= d.len() as u64);
                    assert!(p.vaddr + p.memsz <= USER_LIMIT);
                }
            }
        }
    }
}
