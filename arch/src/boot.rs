//! Loading a Linux kernel and initramfs and filling in `boot_params` for
//! the 64-bit boot protocol (Documentation/arch/x86/boot.rst).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use linux_loader::cmdline::Cmdline;
use linux_loader::loader::bootparam::{boot_e820_entry, boot_params};
use linux_loader::loader::bzimage::BzImage;
use linux_loader::loader::elf::Elf;
use linux_loader::loader::{load_cmdline, KernelLoader};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap};

use crate::layout::*;

/// Errors while loading the payload.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// The kernel file could not be opened or read.
    #[error("cannot read kernel {path}: {source}")]
    KernelFile {
        /// Path given.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is neither an x86-64 ELF vmlinux nor a bzImage.
    #[error(
        "{path} is not a bootable x86-64 Linux kernel (neither ELF vmlinux nor bzImage): {detail}"
    )]
    NotAKernel {
        /// Path given.
        path: String,
        /// The loader's complaint.
        detail: String,
    },
    /// The initramfs could not be read.
    #[error("cannot read initramfs {path}: {source}")]
    InitramfsFile {
        /// Path given.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The initramfs does not fit in low RAM.
    #[error("initramfs of {size} bytes does not fit in guest RAM below {limit:#x}")]
    InitramfsTooLarge {
        /// Its size.
        size: u64,
        /// The highest address it may end at.
        limit: u64,
    },
    /// Bad kernel command line.
    #[error("kernel command line: {0}")]
    Cmdline(String),
    /// Writing to guest memory failed.
    #[error("writing boot data to guest memory: {0}")]
    GuestMemory(String),
    /// Too many RAM ranges for the zero page's e820 table.
    #[error("guest RAM has too many ranges for the e820 table")]
    TooManyE820Entries,
}

/// Where the kernel was loaded and how to enter it.
#[derive(Debug, Clone)]
pub struct LoadedKernel {
    /// 64-bit entry point.
    pub entry: GuestAddress,
    /// bzImage setup header (None for ELF vmlinux).
    pub setup_header: Option<linux_loader::loader::bootparam::setup_header>,
    /// First byte after the kernel image.
    pub end: u64,
}

/// Loads `path` (bzImage or ELF vmlinux) into guest memory.
pub fn load_kernel(mem: &GuestMemoryMmap, path: &Path) -> Result<LoadedKernel, BootError> {
    let display = path.display().to_string();
    let mut file = File::open(path).map_err(|source| BootError::KernelFile {
        path: display.clone(),
        source,
    })?;
    let mut magic = [0u8; 4];
    file.read_exact(&mut magic)
        .and_then(|_| file.seek(SeekFrom::Start(0)).map(|_| ()))
        .map_err(|source| BootError::KernelFile {
            path: display.clone(),
            source,
        })?;
    if &magic == b"\x7fELF" {
        let r =
            Elf::load(mem, None, &mut file, Some(GuestAddress(HIGH_RAM_START))).map_err(|e| {
                BootError::NotAKernel {
                    path: display.clone(),
                    detail: e.to_string(),
                }
            })?;
        return Ok(LoadedKernel {
            entry: r.kernel_load,
            setup_header: None,
            end: r.kernel_end,
        });
    }
    let r =
        BzImage::load(mem, None, &mut file, Some(GuestAddress(HIGH_RAM_START))).map_err(|e| {
            BootError::NotAKernel {
                path: display,
                detail: e.to_string(),
            }
        })?;
    // The 64-bit entry point of a bzImage is 0x200 past the protected-mode code.
    Ok(LoadedKernel {
        entry: r.kernel_load.unchecked_add(0x200),
        setup_header: r.setup_header,
        end: r.kernel_end,
    })
}

/// Writes the command line to [`CMDLINE_START`]; returns its length.
pub fn load_kernel_cmdline(mem: &GuestMemoryMmap, cmdline: &str) -> Result<usize, BootError> {
    let mut cl = Cmdline::new(CMDLINE_MAX_SIZE).map_err(|e| BootError::Cmdline(e.to_string()))?;
    cl.insert_str(cmdline)
        .map_err(|e| BootError::Cmdline(e.to_string()))?;
    load_cmdline(mem, GuestAddress(CMDLINE_START), &cl)
        .map_err(|e| BootError::Cmdline(e.to_string()))?;
    Ok(cmdline.len())
}

/// Copies the initramfs to the top of the first RAM range (below `limit`);
/// returns (address, size).
pub fn load_initramfs(
    mem: &GuestMemoryMmap,
    path: &Path,
    ram: &[(u64, u64)],
    kernel_end: u64,
) -> Result<(u64, u64), BootError> {
    let display = path.display().to_string();
    let mut file = File::open(path).map_err(|source| BootError::InitramfsFile {
        path: display.clone(),
        source,
    })?;
    let size = file
        .seek(SeekFrom::End(0))
        .and_then(|s| file.seek(SeekFrom::Start(0)).map(|_| s))
        .map_err(|source| BootError::InitramfsFile {
            path: display.clone(),
            source,
        })?;
    // Highest RAM below the 32-bit hole that is in one contiguous range.
    let (base, len) = ram
        .iter()
        .copied()
        .find(|&(b, l)| b < MEM_32BIT_DEVICES_START && b + l > HIGH_RAM_START)
        .unwrap_or((0, 0));
    let top = (base + len).min(MEM_32BIT_DEVICES_START);
    let addr = top
        .checked_sub(size)
        .map(|a| a & !0xfff)
        .filter(|&a| a >= kernel_end.max(HIGH_RAM_START))
        .ok_or(BootError::InitramfsTooLarge { size, limit: top })?;
    mem.read_exact_volatile_from(GuestAddress(addr), &mut file, size as usize)
        .map_err(|e| BootError::GuestMemory(e.to_string()))?;
    Ok((addr, size))
}

/// e820 types.
const E820_RAM: u32 = 1;
const E820_RESERVED: u32 = 2;

/// The e820 map for RAM `ranges` (guest base, length), sorted: the
/// legacy BIOS area below 1 MiB is reserved.
pub fn e820_entries(ranges: &[(u64, u64)]) -> Vec<boot_e820_entry> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut out = Vec::new();
    for (base, len) in sorted {
        let end = base + len;
        if base < EBDA_START {
            out.push(e820(base, EBDA_START.min(end) - base, E820_RAM));
        }
        if base < HIGH_RAM_START && end > EBDA_START {
            out.push(e820(EBDA_START, HIGH_RAM_START - EBDA_START, E820_RESERVED));
        }
        let start = base.max(HIGH_RAM_START);
        if end > start {
            out.push(e820(start, end - start, E820_RAM));
        }
    }
    out
}

fn e820(addr: u64, size: u64, r#type: u32) -> boot_e820_entry {
    boot_e820_entry { addr, size, r#type }
}

/// Everything `boot_params` needs.
pub struct BootParamsInput<'a> {
    /// bzImage header, if any.
    pub setup_header: Option<linux_loader::loader::bootparam::setup_header>,
    /// Command line length (without NUL).
    pub cmdline_len: usize,
    /// Initramfs (address, size).
    pub initramfs: Option<(u64, u64)>,
    /// Guest RAM ranges.
    pub ram: &'a [(u64, u64)],
    /// RSDP address.
    pub rsdp: GuestAddress,
}

const KERNEL_BOOT_FLAG_MAGIC: u16 = 0xaa55;
const KERNEL_HDR_MAGIC: u32 = 0x5372_6448;
const KERNEL_LOADER_OTHER: u8 = 0xff;
const KERNEL_MIN_ALIGNMENT_BYTES: u32 = 0x0100_0000;

/// Builds and writes the zero page at [`ZERO_PAGE_START`].
pub fn write_boot_params(mem: &GuestMemoryMmap, input: &BootParamsInput) -> Result<(), BootError> {
    let mut params = boot_params::default();
    if let Some(hdr) = input.setup_header {
        params.hdr = hdr;
    } else {
        params.hdr.boot_flag = KERNEL_BOOT_FLAG_MAGIC;
        params.hdr.header = KERNEL_HDR_MAGIC;
        params.hdr.kernel_alignment = KERNEL_MIN_ALIGNMENT_BYTES;
    }
    params.hdr.type_of_loader = KERNEL_LOADER_OTHER;
    params.hdr.cmd_line_ptr = CMDLINE_START as u32;
    params.hdr.cmdline_size = input.cmdline_len as u32;
    if let Some((addr, size)) = input.initramfs {
        params.hdr.ramdisk_image = addr as u32;
        params.hdr.ramdisk_size = size as u32;
    }
    params.acpi_rsdp_addr = input.rsdp.raw_value();
    let entries = e820_entries(input.ram);
    if entries.len() > params.e820_table.len() {
        return Err(BootError::TooManyE820Entries);
    }
    for (slot, entry) in params.e820_table.iter_mut().zip(&entries) {
        *slot = *entry;
    }
    params.e820_entries = entries.len() as u8;
    mem.write_obj(params, GuestAddress(ZERO_PAGE_START))
        .map_err(|e| BootError::GuestMemory(e.to_string()))?;
    // Make sure the zero page itself is in RAM (it is: inside the first MiB).
    debug_assert!(mem.address_in_range(GuestAddress(ZERO_PAGE_START)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e820_reserves_the_bios_area_and_keeps_zones_apart() {
        let e = e820_entries(&[(0x2000_0000, 0x4000_0000), (0, 0x2000_0000)]);
        let v: Vec<(u64, u64, u32)> = e.iter().map(|x| (x.addr, x.size, x.r#type)).collect();
        assert_eq!(
            v,
            vec![
                (0, EBDA_START, E820_RAM),
                (EBDA_START, HIGH_RAM_START - EBDA_START, E820_RESERVED),
                (HIGH_RAM_START, 0x2000_0000 - HIGH_RAM_START, E820_RAM),
                (0x2000_0000, 0x4000_0000, E820_RAM),
            ]
        );
    }

    #[test]
    fn not_a_kernel_is_reported_with_the_path() {
        let mem = GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x200_0000)]).unwrap();
        let dir = std::env::temp_dir().join(format!("arch-boot-test-{}", std::process::id()));
        std::fs::write(&dir, vec![0u8; 8192]).unwrap();
        let err = load_kernel(&mem, &dir).unwrap_err().to_string();
        std::fs::remove_file(&dir).ok();
        assert!(err.contains("not a bootable"), "{err}");
        let err = load_kernel(&mem, Path::new("/nonexistent/kernel"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot read kernel /nonexistent/kernel"),
            "{err}"
        );
    }
}
