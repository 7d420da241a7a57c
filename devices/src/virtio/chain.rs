//! A descriptor chain as two byte streams: what the device may read (the
//! driver's request) followed by what it may write (its answer).
//!
//! Everything here comes from the guest. Parsing checks that the chain
//! keeps the order virtio requires (section 2.7.4.2: device-readable
//! descriptors first) and that every buffer lies in guest RAM, so the
//! copies later fail only if guest memory itself changes.

use std::ops::Deref;

use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemory, Permissions};

use super::GuestMemoryMmap;

/// Why a chain cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// A device-readable descriptor after a device-writable one.
    #[error("a device-readable descriptor follows a device-writable one")]
    ReadableAfterWritable,
    /// A buffer that is not (entirely) guest RAM.
    #[error("buffer {addr:#x}+{len:#x} is outside guest memory")]
    OutsideMemory {
        /// Guest physical address of the buffer.
        addr: u64,
        /// Its length.
        len: u32,
    },
    /// A copy past the end of the readable or writable part.
    #[error("access beyond the end of the chain")]
    OutOfRange,
    /// An indirect descriptor, although `VIRTIO_RING_F_INDIRECT_DESC` was
    /// not negotiated (no device here offers it).
    #[error("indirect descriptor table without VIRTIO_RING_F_INDIRECT_DESC")]
    IndirectNotNegotiated,
}

/// Refuses the chain at `head` if it refers to an indirect descriptor
/// table. The virtio-queue iterator follows `VIRTQ_DESC_F_INDIRECT`
/// whatever was negotiated, so every device calls this before it walks a
/// chain (virtio 1.2 section 2.7.5.3.1: a driver must not use indirect
/// descriptors unless the feature was negotiated). It reads the direct
/// table only, at most `queue.size()` descriptors. A driver that rewrites
/// the descriptor between this check and the walk gains nothing the crate
/// does not already bound: the walk is still capped by the table size and
/// the 4 GiB chain limit, and each device caps the bytes it serves.
pub fn refuse_indirect(queue: &Queue, mem: &GuestMemoryMmap, head: u16) -> Result<(), ChainError> {
    let table = GuestAddress(queue.desc_table());
    let size = queue.size();
    let mut index = head;
    for _ in 0..size {
        if index >= size {
            // The crate's walk ends here too.
            return Ok(());
        }
        let at = table
            .checked_add(u64::from(index) * std::mem::size_of::<Descriptor>() as u64)
            .ok_or(ChainError::OutsideMemory {
                addr: table.0,
                len: 0,
            })?;
        // An unreadable entry ends the crate's walk as well: nothing to refuse.
        let Ok(desc) = mem.read_obj::<Descriptor>(at) else {
            return Ok(());
        };
        if desc.refers_to_indirect_table() {
            return Err(ChainError::IndirectNotNegotiated);
        }
        if !desc.has_next() {
            return Ok(());
        }
        index = desc.next();
    }
    Ok(())
}

/// The buffers of one descriptor chain, split by direction.
#[derive(Debug, Clone)]
pub struct ChainBuffers {
    /// Head index, for the used ring.
    pub head: u16,
    readable: Vec<(GuestAddress, u32)>,
    writable: Vec<(GuestAddress, u32)>,
    readable_len: u64,
    writable_len: u64,
}

impl ChainBuffers {
    /// Walks `chain` (bounded by the queue size, so a looping chain ends).
    pub fn parse<M>(chain: DescriptorChain<M>, mem: &GuestMemoryMmap) -> Result<Self, ChainError>
    where
        M: Deref,
        M::Target: GuestMemory,
    {
        let mut out = Self {
            head: chain.head_index(),
            readable: Vec::new(),
            writable: Vec::new(),
            readable_len: 0,
            writable_len: 0,
        };
        for desc in chain {
            let (addr, len) = (desc.addr(), desc.len());
            if len == 0 {
                continue;
            }
            let access = if desc.is_write_only() {
                Permissions::Write
            } else {
                Permissions::Read
            };
            if !mem.check_range(addr, len as usize, access) {
                return Err(ChainError::OutsideMemory { addr: addr.0, len });
            }
            if desc.is_write_only() {
                out.writable.push((addr, len));
                out.writable_len += u64::from(len);
            } else if out.writable.is_empty() {
                out.readable.push((addr, len));
                out.readable_len += u64::from(len);
            } else {
                return Err(ChainError::ReadableAfterWritable);
            }
        }
        Ok(out)
    }

    /// Pops the next available chain of `queue` and parses it, refusing
    /// indirect tables ([`refuse_indirect`]). Returns its head index (to
    /// give it back in the used ring whatever the outcome); None when the
    /// driver has made nothing available.
    pub fn pop(
        queue: &mut Queue,
        mem: &GuestMemoryMmap,
    ) -> Option<(u16, Result<Self, ChainError>)> {
        let chain = queue.pop_descriptor_chain(mem)?;
        let head = chain.head_index();
        let parsed = refuse_indirect(queue, mem, head).and_then(|()| Self::parse(chain, mem));
        Some((head, parsed))
    }

    /// The device-readable buffers, in order (each checked to lie in
    /// guest RAM), for I/O straight from guest memory.
    pub fn readable_buffers(&self) -> &[(GuestAddress, u32)] {
        &self.readable
    }

    /// The device-writable buffers, in order (each checked to lie in
    /// guest RAM), for I/O straight into guest memory.
    pub fn writable_buffers(&self) -> &[(GuestAddress, u32)] {
        &self.writable
    }

    /// Bytes the device may read.
    pub fn readable_len(&self) -> u64 {
        self.readable_len
    }

    /// Bytes the device may write.
    pub fn writable_len(&self) -> u64 {
        self.writable_len
    }

    /// Copies `buf.len()` bytes from offset `at` of the readable part.
    pub fn read_at(
        &self,
        mem: &GuestMemoryMmap,
        at: u64,
        buf: &mut [u8],
    ) -> Result<(), ChainError> {
        let mut done = 0;
        walk(&self.readable, at, buf.len(), |addr, range| {
            let n = range.len();
            mem.read_slice(&mut buf[done..done + n], addr)
                .map_err(|_| ChainError::OutsideMemory {
                    addr: addr.0,
                    len: n as u32,
                })?;
            done += n;
            Ok(())
        })
    }

    /// Copies `buf` to offset `at` of the writable part.
    pub fn write_at(&self, mem: &GuestMemoryMmap, at: u64, buf: &[u8]) -> Result<(), ChainError> {
        let mut done = 0;
        walk(&self.writable, at, buf.len(), |addr, range| {
            let n = range.len();
            mem.write_slice(&buf[done..done + n], addr)
                .map_err(|_| ChainError::OutsideMemory {
                    addr: addr.0,
                    len: n as u32,
                })?;
            done += n;
            Ok(())
        })
    }
}

/// Calls `f(address, byte range)` for each piece of `segs` covering
/// `[at, at + len)`; fails without calling `f` if that runs off the end.
fn walk(
    segs: &[(GuestAddress, u32)],
    at: u64,
    len: usize,
    mut f: impl FnMut(GuestAddress, std::ops::Range<usize>) -> Result<(), ChainError>,
) -> Result<(), ChainError> {
    let total: u64 = segs.iter().map(|s| u64::from(s.1)).sum();
    let end = at.checked_add(len as u64).ok_or(ChainError::OutOfRange)?;
    if end > total {
        return Err(ChainError::OutOfRange);
    }
    let mut skip = at;
    let mut left = len;
    let mut pos = 0usize;
    for &(addr, seg_len) in segs {
        if left == 0 {
            break;
        }
        let seg_len = u64::from(seg_len);
        if skip >= seg_len {
            skip -= seg_len;
            continue;
        }
        // seg_len - skip <= u32::MAX, so it fits a usize.
        let n = ((seg_len - skip) as usize).min(left);
        // parse checked that the whole buffer lies in guest RAM.
        f(GuestAddress(addr.0.wrapping_add(skip)), pos..pos + n)?;
        skip = 0;
        pos += n;
        left -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use virtio_bindings::virtio_ring::VRING_DESC_F_WRITE;
    use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
    use virtio_queue::mock::MockSplitQueue;

    const W: u16 = VRING_DESC_F_WRITE as u16;

    fn mem() -> GuestMemoryMmap {
        GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 0x20_0000)]).expect("guest memory")
    }

    fn desc(addr: u64, len: u32, flags: u16) -> RawDescriptor {
        RawDescriptor::from(SplitDescriptor::new(addr, len, flags, 0))
    }

    #[test]
    fn splits_by_direction_and_copies_across_descriptors() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        let chain = vq
            .build_desc_chain(&[
                desc(0x10_0000, 3, 0),
                desc(0x10_1000, 5, 0),
                desc(0x11_0000, 4, W),
                desc(0x11_1000, 4, W),
            ])
            .expect("chain");
        m.write_slice(b"abc", GuestAddress(0x10_0000)).unwrap();
        m.write_slice(b"defgh", GuestAddress(0x10_1000)).unwrap();
        let b = ChainBuffers::parse(chain, &m).unwrap();
        assert_eq!((b.readable_len(), b.writable_len()), (8, 8));
        let mut out = [0u8; 6];
        b.read_at(&m, 1, &mut out).unwrap();
        assert_eq!(&out, b"bcdefg");
        b.write_at(&m, 2, b"WXYZ").unwrap();
        let mut w = [0u8; 4];
        m.read_slice(&mut w, GuestAddress(0x11_0002)).unwrap();
        assert_eq!(&w[..2], b"WX");
        m.read_slice(&mut w, GuestAddress(0x11_1000)).unwrap();
        assert_eq!(&w[..2], b"YZ");
        assert_eq!(b.write_at(&m, 6, b"abc"), Err(ChainError::OutOfRange));
        assert_eq!(
            b.read_at(&m, u64::MAX, &mut out),
            Err(ChainError::OutOfRange)
        );
    }

    #[test]
    fn indirect_tables_are_refused_wherever_they_sit_in_the_chain() {
        use virtio_bindings::virtio_ring::{VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT};
        const I: u16 = VRING_DESC_F_INDIRECT as u16;
        const N: u16 = VRING_DESC_F_NEXT as u16;
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        // Head 0: direct only. Head 2: direct, then an indirect table.
        // Head 5: an indirect table as the head.
        vq.desc_table()
            .store(
                0,
                RawDescriptor::from(SplitDescriptor::new(0x10_0000, 16, N, 1)),
            )
            .unwrap();
        vq.desc_table().store(1, desc(0x10_1000, 16, W)).unwrap();
        vq.desc_table()
            .store(
                2,
                RawDescriptor::from(SplitDescriptor::new(0x10_0000, 16, N, 3)),
            )
            .unwrap();
        vq.desc_table().store(3, desc(0x12_0000, 32, I)).unwrap();
        vq.desc_table().store(5, desc(0x12_0000, 32, I)).unwrap();
        let q: Queue = vq.create_queue().unwrap();
        assert_eq!(refuse_indirect(&q, &m, 0), Ok(()));
        assert_eq!(
            refuse_indirect(&q, &m, 2),
            Err(ChainError::IndirectNotNegotiated)
        );
        assert_eq!(
            refuse_indirect(&q, &m, 5),
            Err(ChainError::IndirectNotNegotiated)
        );
        // A loop of NEXT links ends after the table size.
        vq.desc_table()
            .store(
                7,
                RawDescriptor::from(SplitDescriptor::new(0x10_0000, 16, N, 7)),
            )
            .unwrap();
        assert_eq!(refuse_indirect(&q, &m, 7), Ok(()));
        // A head past the table is left to the crate (which yields nothing).
        assert_eq!(refuse_indirect(&q, &m, 99), Ok(()));
    }

    #[test]
    fn rejects_misordered_and_outside_buffers() {
        let m = mem();
        let vq = MockSplitQueue::new(&m, 16);
        let chain = vq
            .build_desc_chain(&[desc(0x10_0000, 16, W), desc(0x10_1000, 16, 0)])
            .unwrap();
        assert_eq!(
            ChainBuffers::parse(chain, &m).unwrap_err(),
            ChainError::ReadableAfterWritable
        );
        let vq = MockSplitQueue::new(&m, 16);
        let chain = vq.build_desc_chain(&[desc(0x1F_FFF0, 0x20, W)]).unwrap();
        assert!(matches!(
            ChainBuffers::parse(chain, &m),
            Err(ChainError::OutsideMemory { .. })
        ));
    }
}
