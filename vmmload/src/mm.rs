//! The program's virtual address space: 4-level page tables that vmmload
//! builds in guest RAM, the list of mappings (VMAs), the mmap family of
//! system calls, and bounds-checked translation of guest pointers.
//!
//! Memory is mapped eagerly: a mapping gets frames and page-table entries at
//! `mmap` time, so valid accesses never fault (every fault would be an exit).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::ram::{Frames, GuestRam, OWN_PT, OWN_SYS, OWN_USER_TAG, PAGE};

/// PTE present.
pub const PTE_P: u64 = 1;
/// PTE writable.
pub const PTE_W: u64 = 2;
/// PTE user-accessible.
pub const PTE_U: u64 = 4;
/// PTE accessed.
pub const PTE_A: u64 = 0x20;
/// PTE dirty.
pub const PTE_D: u64 = 0x40;
/// Software bit: a frame is attached even though the entry is not present.
pub const PTE_FRAME: u64 = 1 << 9;
/// PTE no-execute.
pub const PTE_NX: u64 = 1 << 63;
/// Physical-address bits of an entry.
pub const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

/// End of the user half that programs may use.
pub const USER_END: u64 = 0x7fff_ffff_f000;
/// Top of the initial stack.
pub const STACK_TOP: u64 = USER_END;
/// Size of the main stack mapping.
pub const STACK_SIZE: u64 = 8 << 20;
/// Highest address for top-down mmap placement (like Linux without ASLR).
pub const MMAP_TOP: u64 = 0x7fff_f7ff_f000;
/// Lowest address mmap hands out.
pub const MMAP_MIN: u64 = 0x1_0000;

/// `PROT_READ`.
pub const PROT_R: u32 = 1;
/// `PROT_WRITE`.
pub const PROT_W: u32 = 2;
/// `PROT_EXEC`.
pub const PROT_X: u32 = 4;

/// What a mapping holds (for reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VmaKind {
    /// Anonymous memory.
    Anon,
    /// Copy of a file (path).
    File(String),
    /// The brk heap.
    Heap,
    /// The main stack.
    Stack,
}

impl VmaKind {
    /// A short label.
    pub fn label(&self) -> String {
        match self {
            VmaKind::Anon => "[anon]".into(),
            VmaKind::File(p) => p.clone(),
            VmaKind::Heap => "[heap]".into(),
            VmaKind::Stack => "[stack]".into(),
        }
    }
}

/// One mapping.
#[derive(Debug, Clone)]
pub struct Vma {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// Contents.
    pub kind: VmaKind,
}

/// Errors of address-space operations, mapped to errno values by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MmError {
    /// Bad address (EFAULT).
    #[error("bad guest address")]
    Fault,
    /// Out of guest memory (ENOMEM).
    #[error("out of guest memory")]
    NoMem,
    /// Invalid argument (EINVAL).
    #[error("invalid argument")]
    Inval,
}

impl MmError {
    /// The Linux errno value.
    pub fn errno(self) -> i32 {
        match self {
            MmError::Fault => libc::EFAULT,
            MmError::NoMem => libc::ENOMEM,
            MmError::Inval => libc::EINVAL,
        }
    }
}

/// A run of host memory backing part of a guest buffer.
#[derive(Debug, Clone, Copy)]
pub struct HostSeg {
    /// Host address.
    pub ptr: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

/// The address space.
#[derive(Clone)]
pub struct Mm {
    /// Guest RAM.
    pub ram: Arc<GuestRam>,
    /// Frame allocator and owner map.
    pub frames: Frames,
    /// Guest physical address of the PML4.
    pub pml4: u64,
    /// Mappings by start address.
    pub vmas: BTreeMap<u64, Vma>,
    /// Start of the brk heap.
    pub brk_start: u64,
    /// Current program break.
    pub brk_cur: u64,
    /// Leaf page tables of the user half: (gva >> 21) → table gpa.
    pub leaf_tables: BTreeMap<u64, u64>,
}

/// Allocates `n` frames and makes sure KVM's memslots cover them before any
/// page table points there.
fn alloc_covered(
    frames: &mut Frames,
    ram: &GuestRam,
    n: u64,
    owner: u64,
) -> Result<Vec<u64>, MmError> {
    let got = frames.alloc(n, owner).ok_or(MmError::NoMem)?;
    if let Err(e) = ram.slots.cover(frames.high_water() * PAGE) {
        log::warn!("adding a KVM memslot for guest RAM failed: {e}");
        for &f in &got {
            frames.free(f);
        }
        return Err(MmError::NoMem);
    }
    Ok(got)
}

fn page_down(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_up(a: u64) -> Option<u64> {
    a.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

fn prot_bits(prot: u32) -> u64 {
    if prot & (PROT_R | PROT_W | PROT_X) == 0 {
        return PTE_FRAME;
    }
    let mut b = PTE_P | PTE_U | PTE_FRAME;
    if prot & PROT_W != 0 {
        b |= PTE_W;
    }
    if prot & PROT_X == 0 {
        b |= PTE_NX;
    }
    b
}

impl Mm {
    /// An empty address space over `ram`.
    pub fn new(ram: Arc<GuestRam>) -> Result<Mm, MmError> {
        let frames = Frames::new(ram.size() / PAGE);
        let mut mm = Mm {
            ram,
            frames,
            pml4: 0,
            vmas: BTreeMap::new(),
            brk_start: 0,
            brk_cur: 0,
            leaf_tables: BTreeMap::new(),
        };
        mm.pml4 = mm.alloc_frames(1, OWN_PT)?[0];
        Ok(mm)
    }

    /// Allocates `n` frames covered by memslots.
    fn alloc_frames(&mut self, n: u64, owner: u64) -> Result<Vec<u64>, MmError> {
        alloc_covered(&mut self.frames, &self.ram, n, owner)
    }

    /// Address of the leaf entry for `gva`, creating tables if `create`.
    fn pte_addr(&mut self, gva: u64, create: bool) -> Result<Option<u64>, MmError> {
        let mut table = self.pml4;
        for level in (1..4).rev() {
            let shift = 12 + 9 * level;
            let idx = (gva >> shift) & 511;
            let entry = self.ram.word(table + idx * 8);
            let v = entry.load(Ordering::Relaxed);
            if v & PTE_P != 0 {
                table = v & PTE_ADDR;
                continue;
            }
            if !create {
                return Ok(None);
            }
            let t = alloc_covered(&mut self.frames, &self.ram, 1, OWN_PT)?[0];
            // Fresh frames read as zero. Intermediate entries allow everything;
            // the leaf decides.
            entry.store(t | PTE_P | PTE_W | PTE_U, Ordering::Relaxed);
            if level == 1 && gva < USER_END {
                self.leaf_tables.insert(gva >> 21, t);
            }
            table = t;
        }
        Ok(Some(table + ((gva >> 12) & 511) * 8))
    }

    /// Reads the leaf entry of `gva` without creating tables.
    pub fn pte(&self, gva: u64) -> u64 {
        let mut table = self.pml4;
        for level in (1..4).rev() {
            let idx = (gva >> (12 + 9 * level)) & 511;
            let v = self.ram.word(table + idx * 8).load(Ordering::Relaxed);
            if v & PTE_P == 0 {
                return 0;
            }
            table = v & PTE_ADDR;
        }
        self.ram
            .word(table + ((gva >> 12) & 511) * 8)
            .load(Ordering::Relaxed)
    }

    /// Maps a vmmload system page (supervisor unless `user`).
    pub fn map_system(&mut self, gva: u64, user: bool, writable: bool) -> Result<u64, MmError> {
        let f = self.alloc_frames(1, OWN_SYS)?[0];
        let a = self.pte_addr(gva, true)?.ok_or(MmError::NoMem)?;
        let mut v = f | PTE_P | PTE_A | PTE_D;
        if user {
            v |= PTE_U;
        }
        if writable {
            v |= PTE_W;
        }
        self.ram.word(a).store(v, Ordering::Relaxed);
        Ok(f)
    }

    /// Makes the vCPUs forget cached translations to these frames (shadow
    /// entries on PVM, TLB entries via the EPT/NPT flush on standard KVM)
    /// after vmmload changed or removed page-table entries that map them:
    /// KVM does not see vmmload's own writes to guest page tables. Frames
    /// that are discarded (munmap, MADV_DONTNEED) need nothing: the discard
    /// itself goes through KVM's MMU notifier.
    fn invalidate(&self, frames: &mut [u64]) {
        frames.sort_unstable();
        let mut i = 0;
        while i < frames.len() {
            let start = frames[i];
            let mut end = start + PAGE;
            i += 1;
            while i < frames.len() && frames[i] <= end {
                end = end.max(frames[i] + PAGE);
                i += 1;
            }
            self.ram.zap_kvm_range(start, end - start);
        }
    }

    /// Maps fresh zeroed frames at `[start, end)` with `prot`.
    fn populate(&mut self, start: u64, end: u64, prot: u32) -> Result<(), MmError> {
        let n = (end - start) / PAGE;
        if prot & (PROT_R | PROT_W | PROT_X) == 0 {
            return Ok(());
        }
        let frames = self.alloc_frames(n, OWN_USER_TAG)?;
        let bits = prot_bits(prot);
        for (i, f) in frames.into_iter().enumerate() {
            let va = start + i as u64 * PAGE;
            self.frames.set_owner(f, va | OWN_USER_TAG);
            let a = match self.pte_addr(va, true) {
                Ok(Some(a)) => a,
                _ => {
                    self.frames.free(f);
                    return Err(MmError::NoMem);
                }
            };
            self.ram.word(a).store(f | bits, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Removes frames and entries in `[start, end)`.
    fn depopulate(&mut self, start: u64, end: u64) {
        let mut va = start;
        while va < end {
            if let Ok(Some(a)) = self.pte_addr(va, false) {
                let w = self.ram.word(a);
                let v = w.swap(0, Ordering::Relaxed);
                if v & (PTE_P | PTE_FRAME) != 0 {
                    let f = v & PTE_ADDR;
                    if self.ram.release(f) {
                        self.frames.free(f);
                    }
                }
                va += PAGE;
            } else {
                // No leaf table: skip to the next 2 MiB boundary.
                va = ((va >> 21) + 1) << 21;
            }
        }
    }

    /// Splits the mapping containing `at` so that a mapping starts at `at`.
    fn split(&mut self, at: u64) {
        let Some((&s, v)) = self.vmas.range(..at).next_back() else {
            return;
        };
        if v.end <= at || s == at {
            return;
        }
        let mut tail = v.clone();
        tail.start = at;
        self.vmas.get_mut(&s).expect("vma").end = at;
        self.vmas.insert(at, tail);
    }

    /// Start addresses of the mappings that overlap `[start, end)`.
    fn overlapping(&self, start: u64, end: u64) -> Vec<u64> {
        let mut out: Vec<u64> = Vec::new();
        if let Some((&s, v)) = self.vmas.range(..start).next_back() {
            if v.end > start {
                out.push(s);
            }
        }
        out.extend(self.vmas.range(start..end).map(|(&s, _)| s));
        out
    }

    /// Whether `[start, end)` overlaps no mapping.
    pub fn is_free(&self, start: u64, end: u64) -> bool {
        start >= MMAP_MIN
            && end <= USER_END
            && start < end
            && self.overlapping(start, end).is_empty()
    }

    /// Finds a free range of `len` bytes, top-down below `MMAP_TOP`.
    pub fn find_free(&self, len: u64) -> Option<u64> {
        let mut top = MMAP_TOP;
        for (&s, v) in self.vmas.range(..MMAP_TOP).rev() {
            if v.end <= top && top - v.end >= len {
                return Some(top - len);
            }
            top = top.min(s);
        }
        if top >= MMAP_MIN + len {
            return Some(top - len);
        }
        None
    }

    /// Unmaps `[start, start+len)`.
    pub fn munmap(&mut self, start: u64, len: u64) -> Result<(), MmError> {
        if !start.is_multiple_of(PAGE) || len == 0 {
            return Err(MmError::Inval);
        }
        let end = page_up(start.checked_add(len).ok_or(MmError::Inval)?).ok_or(MmError::Inval)?;
        if end > USER_END {
            return Err(MmError::Inval);
        }
        self.split(start);
        self.split(end);
        for s in self.overlapping(start, end) {
            if let Some(v) = self.vmas.remove(&s) {
                self.depopulate(v.start, v.end);
            }
        }
        Ok(())
    }

    /// Maps anonymous zeroed memory. `fixed` replaces whatever was there.
    pub fn mmap_anon(
        &mut self,
        hint: u64,
        len: u64,
        prot: u32,
        fixed: bool,
        kind: VmaKind,
    ) -> Result<u64, MmError> {
        let len = page_up(len)
            .filter(|&l| l > 0 && l < USER_END)
            .ok_or(MmError::Inval)?;
        let start = if fixed {
            if !hint.is_multiple_of(PAGE) || hint.checked_add(len).is_none_or(|e| e > USER_END) {
                return Err(MmError::Inval);
            }
            self.munmap(hint, len)?;
            hint
        } else if hint != 0
            && hint.is_multiple_of(PAGE)
            && hint.checked_add(len).is_some_and(|e| self.is_free(hint, e))
        {
            hint
        } else {
            self.find_free(len).ok_or(MmError::NoMem)?
        };
        let end = start + len;
        if let Err(e) = self.populate(start, end, prot) {
            self.depopulate(start, end);
            return Err(e);
        }
        self.vmas.insert(
            start,
            Vma {
                start,
                end,
                prot,
                kind,
            },
        );
        Ok(start)
    }

    /// Changes protection of `[start, start+len)`.
    pub fn mprotect(&mut self, start: u64, len: u64, prot: u32) -> Result<(), MmError> {
        if !start.is_multiple_of(PAGE) {
            return Err(MmError::Inval);
        }
        let end = page_up(start.checked_add(len).ok_or(MmError::Inval)?).ok_or(MmError::NoMem)?;
        if end > USER_END {
            return Err(MmError::NoMem);
        }
        if len == 0 {
            return Ok(());
        }
        // Linux fails with ENOMEM if part of the range is unmapped.
        let mut covered = start;
        for s in self.overlapping(start, end) {
            let v = &self.vmas[&s];
            if v.start > covered {
                return Err(MmError::NoMem);
            }
            covered = v.end;
        }
        if covered < end {
            return Err(MmError::NoMem);
        }
        self.split(start);
        self.split(end);
        let bits = prot_bits(prot);
        let mut changed = Vec::new();
        for s in self.overlapping(start, end) {
            let (vs, ve) = {
                let v = self.vmas.get_mut(&s).expect("vma");
                v.prot = prot;
                (v.start, v.end)
            };
            let mut va = vs;
            while va < ve {
                let slot = self.pte_addr(va, false)?;
                let old = slot
                    .map(|a| self.ram.word(a).load(Ordering::Relaxed))
                    .unwrap_or(0);
                if let (Some(a), true) = (slot, old & (PTE_P | PTE_FRAME) != 0) {
                    self.ram
                        .word(a)
                        .store((old & (PTE_ADDR | PTE_A | PTE_D)) | bits, Ordering::Relaxed);
                    if old & PTE_P != 0 {
                        changed.push(old & PTE_ADDR);
                    }
                } else if bits & PTE_P != 0 {
                    // No frame yet (was PROT_NONE): give it one now.
                    self.populate(va, va + PAGE, prot)?;
                }
                va += PAGE;
            }
        }
        self.invalidate(&mut changed);
        Ok(())
    }

    /// Sets the program break; returns the new (or unchanged) break.
    pub fn brk(&mut self, want: u64) -> u64 {
        if want < self.brk_start || want >= MMAP_TOP {
            return self.brk_cur;
        }
        let old_end = page_up(self.brk_cur).unwrap_or(self.brk_cur);
        let new_end = page_up(want).unwrap_or(want);
        if new_end > old_end {
            if !self.is_free(old_end, new_end) {
                return self.brk_cur;
            }
            if self.populate(old_end, new_end, PROT_R | PROT_W).is_err() {
                self.depopulate(old_end, new_end);
                return self.brk_cur;
            }
            // Extend the heap mapping (or create it).
            let heap = self
                .vmas
                .range(..old_end)
                .next_back()
                .filter(|(_, v)| v.end == old_end && v.kind == VmaKind::Heap)
                .map(|(&s, _)| s);
            match heap {
                Some(s) => self.vmas.get_mut(&s).expect("vma").end = new_end,
                None => {
                    self.vmas.insert(
                        old_end,
                        Vma {
                            start: old_end,
                            end: new_end,
                            prot: PROT_R | PROT_W,
                            kind: VmaKind::Heap,
                        },
                    );
                }
            }
        } else if new_end < old_end {
            let _ = self.munmap(new_end, old_end - new_end);
        }
        self.brk_cur = want;
        want
    }

    /// `mremap` without `MREMAP_FIXED`.
    pub fn mremap(
        &mut self,
        old: u64,
        old_len: u64,
        new_len: u64,
        may_move: bool,
    ) -> Result<u64, MmError> {
        if !old.is_multiple_of(PAGE) || new_len == 0 {
            return Err(MmError::Inval);
        }
        let old_len = page_up(old_len).ok_or(MmError::Inval)?;
        let new_len = page_up(new_len)
            .filter(|&l| l < USER_END)
            .ok_or(MmError::Inval)?;
        let (vma_start, vma) = self
            .vmas
            .range(..=old)
            .next_back()
            .map(|(&s, v)| (s, v.clone()))
            .ok_or(MmError::Fault)?;
        if vma.end < old + old_len || old_len == 0 {
            return Err(MmError::Fault);
        }
        if new_len <= old_len {
            if new_len < old_len {
                self.munmap(old + new_len, old_len - new_len)?;
            }
            return Ok(old);
        }
        let grow_end = old + new_len;
        if vma.end == old + old_len && self.is_free(vma.end, grow_end) {
            self.populate(vma.end, grow_end, vma.prot)?;
            self.vmas.get_mut(&vma_start).expect("vma").end = grow_end;
            return Ok(old);
        }
        if !may_move {
            return Err(MmError::NoMem);
        }
        let dst = self.find_free(new_len).ok_or(MmError::NoMem)?;
        // Move the frames: rewrite entries, no copying.
        let mut moved = Vec::new();
        for i in 0..old_len / PAGE {
            let (src_va, dst_va) = (old + i * PAGE, dst + i * PAGE);
            let Some(sa) = self.pte_addr(src_va, false)? else {
                continue;
            };
            let v = self.ram.word(sa).swap(0, Ordering::Relaxed);
            let da = self.pte_addr(dst_va, true)?.ok_or(MmError::NoMem)?;
            self.ram.word(da).store(v, Ordering::Relaxed);
            if v & (PTE_P | PTE_FRAME) != 0 {
                self.frames.set_owner(v & PTE_ADDR, dst_va | OWN_USER_TAG);
                moved.push(v & PTE_ADDR);
            }
        }
        self.invalidate(&mut moved);
        self.populate(dst + old_len, dst + new_len, vma.prot)?;
        self.split(old);
        self.split(old + old_len);
        self.vmas.remove(&old);
        self.vmas.insert(
            dst,
            Vma {
                start: dst,
                end: dst + new_len,
                prot: vma.prot,
                kind: vma.kind,
            },
        );
        Ok(dst)
    }

    /// Host runs backing guest `[gva, gva+len)`, checking that every page is
    /// a present user page (and writable if `write`).
    pub fn translate(&self, gva: u64, len: u64, write: bool) -> Result<Vec<HostSeg>, MmError> {
        let mut segs: Vec<HostSeg> = Vec::new();
        if len == 0 {
            return Ok(segs);
        }
        let end = gva.checked_add(len).ok_or(MmError::Fault)?;
        if end > USER_END {
            return Err(MmError::Fault);
        }
        let mut va = gva;
        while va < end {
            let pte = self.pte(va);
            let need = PTE_P | PTE_U | if write { PTE_W } else { 0 };
            if pte & need != need {
                return Err(MmError::Fault);
            }
            let off = va & (PAGE - 1);
            let n = (PAGE - off).min(end - va);
            let p = self
                .ram
                .ptr((pte & PTE_ADDR) + off, n)
                .ok_or(MmError::Fault)?;
            match segs.last_mut() {
                // SAFETY: pointer arithmetic for comparison only, within the RAM mapping.
                Some(last) if unsafe { last.ptr.add(last.len) } == p => last.len += n as usize,
                _ => segs.push(HostSeg {
                    ptr: p,
                    len: n as usize,
                }),
            }
            va += n;
        }
        Ok(segs)
    }

    /// Length of the longest accessible prefix of `[gva, gva+len)`.
    pub fn accessible_prefix(&self, gva: u64, len: u64, write: bool) -> u64 {
        let need = PTE_P | PTE_U | if write { PTE_W } else { 0 };
        let mut va = gva;
        let end = gva.saturating_add(len).min(USER_END);
        while va < end {
            if self.pte(va) & need != need {
                break;
            }
            va = page_down(va) + PAGE;
        }
        va.min(end).saturating_sub(gva)
    }

    /// Copies guest memory into a new buffer.
    pub fn read_bytes(&self, gva: u64, len: u64) -> Result<Vec<u8>, MmError> {
        let mut out = Vec::with_capacity(len as usize);
        for s in self.translate(gva, len, false)? {
            // SAFETY: the segment lies inside guest RAM (checked by translate).
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(s.ptr, s.len) });
        }
        Ok(out)
    }

    /// Copies `data` into guest memory.
    pub fn write_bytes(&self, gva: u64, data: &[u8]) -> Result<(), MmError> {
        let mut off = 0;
        for s in self.translate(gva, data.len() as u64, true)? {
            // SAFETY: destination checked by translate; source is a host buffer.
            unsafe { std::ptr::copy_nonoverlapping(data[off..].as_ptr(), s.ptr, s.len) };
            off += s.len;
        }
        Ok(())
    }

    /// Copies into guest memory ignoring page protection (loader use: text pages).
    pub fn poke(&self, gva: u64, data: &[u8]) -> Result<(), MmError> {
        let mut off = 0usize;
        while off < data.len() {
            let va = gva + off as u64;
            let pte = self.pte(va);
            if pte & (PTE_P | PTE_FRAME) == 0 {
                return Err(MmError::Fault);
            }
            let po = va & (PAGE - 1);
            let n = ((PAGE - po) as usize).min(data.len() - off);
            self.ram.write((pte & PTE_ADDR) + po, &data[off..off + n]);
            off += n;
        }
        Ok(())
    }

    /// Reads a NUL-terminated string of at most `max` bytes.
    pub fn read_cstr(&self, gva: u64, max: u64) -> Result<Vec<u8>, MmError> {
        let mut out = Vec::new();
        let mut va = gva;
        loop {
            let chunk = (PAGE - (va & (PAGE - 1))).min(max - out.len() as u64);
            if chunk == 0 {
                return Err(MmError::Inval);
            }
            let b = self.read_bytes(va, chunk)?;
            if let Some(z) = b.iter().position(|&c| c == 0) {
                out.extend_from_slice(&b[..z]);
                return Ok(out);
            }
            out.extend_from_slice(&b);
            va += chunk;
        }
    }

    /// Reads a little-endian u64.
    pub fn read_u64(&self, gva: u64) -> Result<u64, MmError> {
        let b = self.read_bytes(gva, 8)?;
        Ok(u64::from_le_bytes(
            b.try_into().map_err(|_| MmError::Fault)?,
        ))
    }

    /// Mapping containing `gva`.
    pub fn vma_at(&self, gva: u64) -> Option<&Vma> {
        self.vmas
            .range(..=gva)
            .next_back()
            .map(|(_, v)| v)
            .filter(|v| v.end > gva)
    }

    /// Whether a guest physical frame belongs to vmmload (page tables, system pages).
    #[cfg(test)]
    pub fn is_private_frame(&self, gpa: u64) -> bool {
        matches!(self.frames.owner_of(gpa), OWN_PT | OWN_SYS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mm() -> Mm {
        Mm::new(Arc::new(GuestRam::new(64 << 20).unwrap())).unwrap()
    }

    #[test]
    fn anonymous_mapping_is_translatable_and_zeroed() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, 3 * PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        assert_eq!(a, MMAP_TOP - 3 * PAGE);
        let segs = m.translate(a, 3 * PAGE, true).unwrap();
        assert_eq!(segs.iter().map(|s| s.len).sum::<usize>(), 3 * PAGE as usize);
        assert!(m.read_bytes(a, 3 * PAGE).unwrap().iter().all(|&b| b == 0));
        m.write_bytes(a + 4090, b"hello world").unwrap();
        assert_eq!(m.read_bytes(a + 4090, 11).unwrap(), b"hello world");
    }

    #[test]
    fn translation_rejects_unmapped_private_and_readonly_memory() {
        let mut m = mm();
        let a = m.mmap_anon(0, PAGE, PROT_R, false, VmaKind::Anon).unwrap();
        assert!(m.translate(a, 8, false).is_ok());
        assert_eq!(m.translate(a, 8, true).unwrap_err(), MmError::Fault);
        assert_eq!(
            m.translate(a + PAGE - 4, 8, false).unwrap_err(),
            MmError::Fault
        );
        assert_eq!(m.translate(0, 1, false).unwrap_err(), MmError::Fault);
        assert_eq!(
            m.translate(u64::MAX - 3, 8, false).unwrap_err(),
            MmError::Fault
        );
        m.map_system(0xffff_ff80_0000_0000, true, false).unwrap();
        assert_eq!(
            m.translate(0xffff_ff80_0000_0000, 8, false).unwrap_err(),
            MmError::Fault
        );
    }

    #[test]
    fn munmap_mprotect_split_mappings() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, 4 * PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.munmap(a + PAGE, PAGE).unwrap();
        assert_eq!(m.vmas.len(), 2);
        assert!(m.translate(a + PAGE, 1, false).is_err());
        m.mprotect(a + 2 * PAGE, PAGE, PROT_R).unwrap();
        assert!(m.translate(a + 2 * PAGE, 1, true).is_err());
        assert!(m.translate(a + 3 * PAGE, 1, true).is_ok());
        assert_eq!(m.mprotect(a, 4 * PAGE, PROT_R), Err(MmError::NoMem));
    }

    #[test]
    fn prot_none_reservation_gets_frames_on_mprotect() {
        let mut m = mm();
        let used = m.frames.used();
        let a = m.mmap_anon(0, 256 * PAGE, 0, false, VmaKind::Anon).unwrap();
        assert_eq!(m.frames.used(), used);
        m.mprotect(a, 2 * PAGE, PROT_R | PROT_W).unwrap();
        m.write_bytes(a, b"x").unwrap();
        assert!(m.translate(a + 2 * PAGE, 1, false).is_err());
    }

    #[test]
    fn mremap_grows_and_moves_keeping_contents() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        let _b = m
            .mmap_anon(0, PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.write_bytes(a, b"keep").unwrap();
        let c = m.mremap(a, PAGE, 4 * PAGE, true).unwrap();
        assert_eq!(m.read_bytes(c, 4).unwrap(), b"keep");
        assert!(m.translate(c + 3 * PAGE, 1, true).is_ok());
        assert_eq!(m.mremap(c, 4 * PAGE, PAGE, false).unwrap(), c);
    }

    #[test]
    fn brk_grows_and_shrinks() {
        let mut m = mm();
        m.brk_start = 0x60_0000;
        m.brk_cur = 0x60_0000;
        assert_eq!(m.brk(0), 0x60_0000);
        assert_eq!(m.brk(0x60_2100), 0x60_2100);
        m.write_bytes(0x60_2000, b"z").unwrap();
        assert_eq!(m.brk(0x60_1000), 0x60_1000);
        assert!(m.translate(0x60_1000, 1, false).is_err());
    }

    /// Fuzz-style: random (address, length, direction) triples never give a
    /// segment outside guest RAM and never panic.
    #[test]
    fn fuzz_pointer_translation_stays_inside_guest_ram() {
        let mut m = mm();
        let a = m
            .mmap_anon(0, 16 * PAGE, PROT_R | PROT_W, false, VmaKind::Anon)
            .unwrap();
        m.munmap(a + 5 * PAGE, PAGE).unwrap();
        let base = m.ram.host_base();
        let size = m.ram.size();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..50000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let addr = match i % 3 {
                0 => seed,
                1 => a.wrapping_add(seed % (20 * PAGE)).wrapping_sub(2 * PAGE),
                _ => seed >> (seed % 64),
            };
            let len = (seed >> 7) % (if i % 2 == 0 { 3 * PAGE } else { u64::MAX });
            if let Ok(segs) = m.translate(addr, len, i % 5 == 0) {
                for s in segs {
                    let p = s.ptr as u64;
                    assert!(p >= base && p + s.len as u64 <= base + size);
                }
            }
        }
    }
}
