//! Loading the program (and its `PT_INTERP` loader) into the address space
//! and laying out the initial stack the way Linux does: argc, argv, envp,
//! auxv, then the strings and AT_RANDOM bytes near the top.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::elf::{Elf, ElfError, ET_DYN, PF_R, PF_W, PF_X, PHDR_SIZE};
use crate::mm::{Mm, MmError, VmaKind, PROT_R, PROT_W, PROT_X, STACK_SIZE, STACK_TOP};
use crate::ram::PAGE;

/// Largest executable or interpreter we load.
const MAX_IMAGE: u64 = 1 << 30;
/// Where position-independent executables go (Linux's ELF_ET_DYN_BASE without ASLR).
pub const PIE_BASE: u64 = 0x5555_5555_4000;
/// Largest total size of argv + envp strings (Linux's limit is similar).
const MAX_ARG_BYTES: usize = 2 << 20;

/// Loading errors.
#[derive(Debug, Error)]
pub enum LoadError {
    /// The program or interpreter cannot be read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
    /// The program was not found on PATH.
    #[error("{0}: command not found")]
    NotFound(String),
    /// Not executable.
    #[error("{0}: permission denied (not executable)")]
    NotExecutable(String),
    /// The file is not a loadable ELF image.
    #[error("{0}: {1}")]
    Elf(String, ElfError),
    /// The file is too large.
    #[error("{0}: file too large ({1} bytes)")]
    TooLarge(String, u64),
    /// The interpreter named by PT_INTERP is unusable.
    #[error("{0}: cannot load interpreter {1}: {2}")]
    Interp(String, String, Box<LoadError>),
    /// Guest memory could not hold the image.
    #[error("{0}: cannot map image: {1}")]
    Map(String, MmError),
    /// Arguments too long.
    #[error("argument list too long")]
    TooBig,
    /// Too many nested `#!` interpreters.
    #[error("too many levels of #! interpreters")]
    TooDeep,
}

impl LoadError {
    /// Exit status to use, following shell conventions (127 not found, 126 cannot execute).
    pub fn exit_code(&self) -> i32 {
        match self {
            LoadError::NotFound(_) => 127,
            LoadError::Io(_, e) if e.kind() == std::io::ErrorKind::NotFound => 127,
            LoadError::Interp(_, _, inner) => inner.exit_code(),
            _ => 126,
        }
    }
}

/// Result of loading.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// Where execution starts (interpreter entry for dynamic programs).
    pub entry: u64,
    /// Initial stack pointer.
    pub rsp: u64,
    /// Resolved path of the program.
    pub path: PathBuf,
    /// Interpreter path, if any.
    pub interp: Option<String>,
}

/// Finds `prog` like execvp: as given if it has a slash, else on `PATH`.
pub fn resolve(prog: &str) -> Result<PathBuf, LoadError> {
    if prog.contains('/') {
        return Ok(PathBuf::from(prog));
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in path.split(':') {
        let p = Path::new(if dir.is_empty() { "." } else { dir }).join(prog);
        if let Ok(m) = fs::metadata(&p) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(p);
            }
        }
    }
    Err(LoadError::NotFound(prog.to_string()))
}

fn read_image(path: &Path) -> Result<Vec<u8>, LoadError> {
    let name = path.display().to_string();
    let meta = fs::metadata(path).map_err(|e| LoadError::Io(name.clone(), e))?;
    if !meta.is_file() {
        return Err(LoadError::NotExecutable(name));
    }
    if meta.len() > MAX_IMAGE {
        return Err(LoadError::TooLarge(name, meta.len()));
    }
    fs::read(path).map_err(|e| LoadError::Io(name, e))
}

/// Maps one image at `bias` (0 for fixed-address executables); returns the bias.
fn map_image(
    mm: &mut Mm,
    elf: &Elf,
    data: &[u8],
    name: &str,
    dyn_base: Option<u64>,
) -> Result<u64, LoadError> {
    let (lo, hi) = elf.span();
    let len = hi - lo;
    let map_err = |e| LoadError::Map(name.to_string(), e);
    let bias = if elf.e_type == ET_DYN {
        let base = match dyn_base {
            Some(b) => b,
            None => mm
                .find_free(len)
                .ok_or(LoadError::Map(name.to_string(), MmError::NoMem))?,
        };
        base.wrapping_sub(lo)
    } else {
        0
    };
    let start = lo.wrapping_add(bias);
    mm.mmap_anon(
        start,
        len,
        PROT_R | PROT_W,
        true,
        VmaKind::File(name.to_string()),
    )
    .map_err(map_err)?;
    for ph in elf.loads() {
        let src = &data[ph.offset as usize..(ph.offset + ph.filesz) as usize];
        mm.poke(ph.vaddr.wrapping_add(bias), src).map_err(map_err)?;
    }
    // Final protections: the union of the segments covering each page;
    // gaps between segments become inaccessible.
    let mut page = lo;
    while page < hi {
        let mut prot = 0;
        for ph in elf.loads() {
            let (s, e) = (ph.vaddr & !(PAGE - 1), ph.vaddr + ph.memsz);
            if page >= s && page < e {
                if ph.flags & PF_R != 0 {
                    prot |= PROT_R;
                }
                if ph.flags & PF_W != 0 {
                    prot |= PROT_W;
                }
                if ph.flags & PF_X != 0 {
                    prot |= PROT_X;
                }
            }
        }
        mm.mprotect(page.wrapping_add(bias), PAGE, prot)
            .map_err(map_err)?;
        page += PAGE;
    }
    Ok(bias)
}

fn cpuid_edx1() -> u64 {
    std::arch::x86_64::__cpuid(1).edx as u64
}

/// Loads `path` with `argv` and `envp` into `mm`.
pub fn load(
    mm: &mut Mm,
    path: &Path,
    argv: &[String],
    envp: &[String],
) -> Result<Loaded, LoadError> {
    load_depth(mm, path, argv, envp, 0)
}

/// Parses a `#!` line like Linux's binfmt_script: the interpreter and at
/// most one argument (the rest of the line, trimmed).
pub fn parse_shebang(data: &[u8]) -> Option<(String, Option<String>)> {
    let rest = data.strip_prefix(b"#!")?;
    let line_end = rest
        .iter()
        .position(|&c| c == b'\n')
        .unwrap_or(rest.len().min(256));
    let line = String::from_utf8_lossy(&rest[..line_end.min(256)]).to_string();
    let line = line.trim_matches(|c: char| c == ' ' || c == '\t' || c == '\r');
    if line.is_empty() {
        return None;
    }
    match line.find([' ', '\t']) {
        Some(i) => {
            let arg = line[i..].trim_matches(|c: char| c == ' ' || c == '\t');
            Some((
                line[..i].to_string(),
                (!arg.is_empty()).then(|| arg.to_string()),
            ))
        }
        None => Some((line.to_string(), None)),
    }
}

fn load_depth(
    mm: &mut Mm,
    path: &Path,
    argv: &[String],
    envp: &[String],
    depth: u32,
) -> Result<Loaded, LoadError> {
    let name = path.display().to_string();
    let meta = fs::metadata(path).map_err(|e| LoadError::Io(name.clone(), e))?;
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(LoadError::NotExecutable(name));
    }
    let data = read_image(path)?;
    if data.starts_with(b"#!") {
        let Some((interp, arg)) = parse_shebang(&data) else {
            return Err(LoadError::Elf(name, ElfError::BadMagic));
        };
        if depth >= 4 {
            return Err(LoadError::Interp(
                name,
                interp,
                Box::new(LoadError::TooDeep),
            ));
        }
        let mut av = vec![interp.clone()];
        av.extend(arg);
        av.push(name.clone());
        av.extend(argv.iter().skip(1).cloned());
        return load_depth(mm, Path::new(&interp), &av, envp, depth + 1)
            .map_err(|e| LoadError::Interp(name, interp, Box::new(e)));
    }
    let elf = Elf::parse(&data).map_err(|e| LoadError::Elf(name.clone(), e))?;

    // Check the interpreter before mapping anything.
    let interp = match &elf.interp {
        Some(ip) => {
            let wrap = |e| LoadError::Interp(name.clone(), ip.clone(), Box::new(e));
            let idata = read_image(Path::new(ip)).map_err(wrap)?;
            let ielf = Elf::parse(&idata).map_err(|e| wrap(LoadError::Elf(ip.clone(), e)))?;
            if ielf.interp.is_some() {
                return Err(wrap(LoadError::Elf(
                    ip.clone(),
                    ElfError::Corrupt("interpreter asks for an interpreter".into()),
                )));
            }
            Some((ip.clone(), idata, ielf))
        }
        None => None,
    };

    let bias = map_image(mm, &elf, &data, &name, Some(PIE_BASE))?;
    let (_, hi) = elf.span();
    mm.brk_start = hi.wrapping_add(bias);
    mm.brk_cur = mm.brk_start;
    let prog_entry = elf.entry.wrapping_add(bias);
    let phdr = elf.phdr_vaddr().unwrap_or(0).wrapping_add(bias);

    let (entry, interp_base) = match &interp {
        Some((ip, idata, ielf)) => {
            let ib = map_image(mm, ielf, idata, ip, None)
                .map_err(|e| LoadError::Interp(name.clone(), ip.clone(), Box::new(e)))?;
            let (ilo, _) = ielf.span();
            (ielf.entry.wrapping_add(ib), ilo.wrapping_add(ib))
        }
        None => (prog_entry, 0),
    };

    let stack_lo = STACK_TOP - STACK_SIZE;
    mm.mmap_anon(stack_lo, STACK_SIZE, PROT_R | PROT_W, true, VmaKind::Stack)
        .map_err(|e| LoadError::Map(name.clone(), e))?;

    // Strings at the top of the stack.
    let total: usize = argv.iter().chain(envp).map(|s| s.len() + 1).sum();
    if total > MAX_ARG_BYTES {
        return Err(LoadError::TooBig);
    }
    let mut sp = STACK_TOP - 8;
    let mut push_str = |mm: &mut Mm, s: &[u8]| -> u64 {
        sp -= s.len() as u64 + 1;
        let mut b = s.to_vec();
        b.push(0);
        mm.poke(sp, &b).expect("stack mapped");
        sp
    };
    let execfn = push_str(mm, path.as_os_str().as_encoded_bytes());
    let argp: Vec<u64> = argv.iter().map(|a| push_str(mm, a.as_bytes())).collect();
    let envpp: Vec<u64> = envp.iter().map(|e| push_str(mm, e.as_bytes())).collect();
    let platform = push_str(mm, b"x86_64");
    let mut random = [0u8; 16];
    // SAFETY: getrandom writes at most 16 bytes into our buffer.
    unsafe { libc::getrandom(random.as_mut_ptr() as *mut libc::c_void, 16, 0) };
    sp = (sp - 16) & !15;
    let rand_at = sp;
    mm.poke(rand_at, &random).expect("stack mapped");

    // SAFETY: these getters have no preconditions.
    let (uid, euid, gid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    let auxv: Vec<(u64, u64)> = vec![
        (3, phdr),
        (4, PHDR_SIZE as u64),
        (5, elf.phdrs.len() as u64),
        (6, PAGE),
        (7, interp_base),
        (8, 0),
        (9, prog_entry),
        (11, uid as u64),
        (12, euid as u64),
        (13, gid as u64),
        (14, egid as u64),
        (15, platform),
        (16, cpuid_edx1()),
        (17, 100),
        (23, 0),
        (25, rand_at),
        (26, 0),
        (31, execfn),
        (0, 0),
    ];
    let words = 1 + argp.len() + 1 + envpp.len() + 1 + 2 * auxv.len();
    sp -= words as u64 * 8;
    sp &= !15;
    let mut v: Vec<u64> = Vec::with_capacity(words);
    v.push(argp.len() as u64);
    v.extend(&argp);
    v.push(0);
    v.extend(&envpp);
    v.push(0);
    for (k, val) in auxv {
        v.push(k);
        v.push(val);
    }
    let bytes: Vec<u8> = v.iter().flat_map(|w| w.to_le_bytes()).collect();
    mm.poke(sp, &bytes).expect("stack mapped");

    Ok(Loaded {
        entry,
        rsp: sp,
        path: path.to_path_buf(),
        interp: interp.map(|i| i.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_lines_parse_like_linux() {
        assert_eq!(
            parse_shebang(b"#!/bin/sh\necho"),
            Some(("/bin/sh".into(), None))
        );
        assert_eq!(
            parse_shebang(b"#! /usr/bin/env  python3 -u \n"),
            Some(("/usr/bin/env".into(), Some("python3 -u".into())))
        );
        assert_eq!(parse_shebang(b"#!\n"), None);
        assert_eq!(parse_shebang(b"\x7fELF"), None);
    }
}
