//! virtio-blk (virtio 1.2 section 5.2) over a raw image file.
//!
//! One request queue, or with `num_queues` above one `VIRTIO_BLK_F_MQ`
//! and that many queues (multiqueue needs MSI-X: virtio-pci), each served
//! by its own device thread; the threads share the image (positioned
//! reads and writes need no lock) and atomic counters. A request is a
//! 16-byte header (type, reserved, sector) the device reads, data, and a
//! status byte the device writes last. Supported: IN, OUT, FLUSH, GET_ID;
//! other types get `VIRTIO_BLK_S_UNSUPP`. Requests are checked before any
//! I/O: data direction, lengths (whole sectors), the sector range against
//! the capacity, the read-only flag. A bad request gets
//! `VIRTIO_BLK_S_IOERR` (or no status at all when the chain has no
//! writable byte to put it in), is counted, and the first of each kind is
//! logged. Data moves through an aligned bounce buffer, so `O_DIRECT`
//! images work and guest memory is only touched through vm-memory.
//!
//! Limits a guest cannot exceed: one request moves at most
//! [`MAX_REQUEST_BYTES`] (offered as `seg_max` x `size_max`, so a
//! conforming driver never asks for more; a larger chain is refused
//! before any I/O), which bounds how long one request holds the device
//! thread away from its kill event; chains with indirect tables are
//! refused (`VIRTIO_RING_F_INDIRECT_DESC` is not offered).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use log::{info, warn};
use virtio_bindings::virtio_blk::{
    VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX,
    VIRTIO_BLK_F_SIZE_MAX, VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK,
    VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN,
    VIRTIO_BLK_T_OUT,
};
use vmm_sys_util::eventfd::EventFd;

use super::chain::ChainBuffers;
use super::fault::{guest_fault, ignored_config_write};
use super::{
    ActivateError, ActiveQueue, DeviceCounters, GuestMemoryMmap, Queue, QueueT, VirtioDevice,
    VirtioInterrupt, VirtioInterruptType, VIRTIO_F_VERSION_1,
};
use crate::event_loop::{EventHandler, LoopContext};

/// Virtio device id of a block device.
pub const VIRTIO_ID_BLOCK: u32 = 2;
/// Bytes per virtio-blk sector (fixed by the spec, whatever the image).
pub const SECTOR_SIZE: u64 = 512;
/// Size of the request header.
const HEADER_LEN: u64 = 16;
/// The most data bytes one request may move (reads or writes).
pub const MAX_REQUEST_BYTES: u64 = 4 << 20;
/// Smallest segment size offered: Linux wants at least a page.
const MIN_SEGMENT: u32 = 4096;
/// Data bytes served per wake-up before the thread goes back to epoll, so
/// a kill or reset waits for at most this much I/O, however full the queue.
pub const BATCH_BYTES: u64 = 2 * MAX_REQUEST_BYTES;
/// Bounce buffer: the most bytes moved per host read/write.
const CHUNK: usize = 128 * 1024;
/// Alignment of the bounce buffer (enough for `O_DIRECT` on 4K devices).
const ALIGN: usize = 4096;
const QUEUE_TOKEN: u64 = 0;
/// Most request queues a disk may have (Cloud Hypervisor's limit on
/// vCPUs is higher; 64 keeps one MSI-X vector per queue in the table).
pub const MAX_QUEUES: u16 = 64;
/// Offset of `num_queues` in the configuration space (after capacity,
/// size_max, seg_max, geometry, blk_size, topology, writeback, unused0).
const CONFIG_NUM_QUEUES: usize = 34;

/// What the device has done, for `vm.counters`.
#[derive(Debug, Default)]
pub struct BlockMetrics {
    /// Completed reads.
    pub read_ops: AtomicU64,
    /// Completed writes.
    pub write_ops: AtomicU64,
    /// Completed flushes.
    pub flush_ops: AtomicU64,
    /// Bytes read into the guest.
    pub read_bytes: AtomicU64,
    /// Bytes written to the image.
    pub write_bytes: AtomicU64,
    /// Malformed requests: wrong direction, bad lengths, outside guest RAM.
    pub bad_requests: AtomicU64,
    /// Requests failed with IOERR: sector range, read-only, host I/O errors.
    pub io_errors: AtomicU64,
    /// Requests of a type the device does not implement.
    pub unsupported: AtomicU64,
    /// Requests refused for moving more than [`MAX_REQUEST_BYTES`].
    pub oversized_requests: AtomicU64,
    /// Guest writes to the (read-only) configuration space, ignored.
    pub config_writes: AtomicU64,
}

impl DeviceCounters for BlockMetrics {
    fn snapshot(&self) -> std::collections::BTreeMap<String, u64> {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        super::named_counters(&[
            ("read_ops", l(&self.read_ops)),
            ("write_ops", l(&self.write_ops)),
            ("flush_ops", l(&self.flush_ops)),
            ("read_bytes", l(&self.read_bytes)),
            ("write_bytes", l(&self.write_bytes)),
            ("bad_requests", l(&self.bad_requests)),
            ("io_errors", l(&self.io_errors)),
            ("unsupported", l(&self.unsupported)),
            ("oversized_requests", l(&self.oversized_requests)),
            ("config_writes", l(&self.config_writes)),
        ])
    }
}

/// How the image is opened.
#[derive(Debug, Clone)]
pub struct DiskOptions {
    /// The raw image (a file or a host block device).
    pub path: PathBuf,
    /// Open read-only and offer `VIRTIO_BLK_F_RO`.
    pub readonly: bool,
    /// Open with `O_DIRECT`.
    pub direct: bool,
    /// Serial returned by GET_ID; derived from the image's inode when None.
    pub serial: Option<String>,
    /// Size of each request queue.
    pub queue_size: u16,
    /// Request queues, 1..=[`MAX_QUEUES`]; above one the device offers
    /// `VIRTIO_BLK_F_MQ` and serves each queue on its own thread.
    pub num_queues: u16,
}

/// An open image and its size.
struct Image {
    file: File,
    sectors: u64,
    readonly: bool,
}

fn open_image(o: &DiskOptions) -> io::Result<Image> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(!o.readonly);
    if o.direct {
        opts.custom_flags(libc::O_DIRECT);
    }
    let mut file = opts.open(&o.path)?;
    // SEEK_END also gives the size of a block device (metadata says 0).
    let bytes = file.seek(SeekFrom::End(0))?;
    if !bytes.is_multiple_of(SECTOR_SIZE) {
        warn!(
            "block: {} is {bytes} bytes, not a whole number of 512-byte sectors; the last {} bytes are not visible",
            o.path.display(),
            bytes % SECTOR_SIZE
        );
    }
    Ok(Image {
        file,
        sectors: bytes / SECTOR_SIZE,
        readonly: o.readonly,
    })
}

/// The block device.
pub struct Block {
    options: DiskOptions,
    /// Shared with the data path (I/O goes through `&File`).
    image: Arc<Image>,
    sectors: u64,
    serial: [u8; VIRTIO_BLK_ID_BYTES as usize],
    metrics: Arc<BlockMetrics>,
}

impl Block {
    /// Opens the image now, so a missing or read-only file is a
    /// configuration error and not a failure inside the running guest.
    pub fn new(options: DiskOptions) -> io::Result<Self> {
        if options.num_queues == 0 || options.num_queues > MAX_QUEUES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("num_queues={} must be 1..={MAX_QUEUES}", options.num_queues),
            ));
        }
        let image = open_image(&options)?;
        let mut serial = [0u8; VIRTIO_BLK_ID_BYTES as usize];
        match &options.serial {
            Some(s) => {
                let n = s.len().min(serial.len());
                serial[..n].copy_from_slice(&s.as_bytes()[..n]);
            }
            None => {
                // Stable across boots for the same image, as a disk serial should be.
                let m = image.file.metadata()?;
                let id = format!("{:x}{:x}", m.dev(), m.ino());
                let n = id.len().min(serial.len());
                serial[..n].copy_from_slice(&id.as_bytes()[..n]);
            }
        }
        info!(
            "block: {} ({} sectors{}{})",
            options.path.display(),
            image.sectors,
            if options.readonly { ", read-only" } else { "" },
            if options.direct { ", O_DIRECT" } else { "" }
        );
        Ok(Self {
            sectors: image.sectors,
            image: Arc::new(image),
            options,
            serial,
            metrics: Arc::new(BlockMetrics::default()),
        })
    }

    /// The device's counters (shared with its thread).
    pub fn metrics(&self) -> Arc<BlockMetrics> {
        self.metrics.clone()
    }

    /// Capacity in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    fn config_space(&self) -> [u8; CONFIG_NUM_QUEUES + 2] {
        let mut c = [0u8; CONFIG_NUM_QUEUES + 2];
        c[0..8].copy_from_slice(&self.sectors.to_le_bytes());
        let (size_max, seg_max) = segment_limits(self.options.queue_size);
        c[8..12].copy_from_slice(&size_max.to_le_bytes());
        c[12..16].copy_from_slice(&seg_max.to_le_bytes());
        // Read by the driver only with VIRTIO_BLK_F_MQ.
        c[CONFIG_NUM_QUEUES..].copy_from_slice(&self.options.num_queues.to_le_bytes());
        c
    }

    /// One data path per ready queue, each with its own copy of what it
    /// needs. Queues the driver left out (fewer than offered) get none.
    fn servers(
        &self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Vec<Box<dyn EventHandler>>, ActivateError> {
        if !queues.iter().any(|q| q.index == 0) {
            return Err(ActivateError::MissingQueue(0));
        }
        Ok(queues
            .into_iter()
            .map(|active| {
                Box::new(Server {
                    mem: mem.clone(),
                    interrupt: interrupt.clone(),
                    // Below MAX_QUEUES: checked by the transport's layout.
                    index: active.index as u16,
                    queue: active.queue,
                    queue_evt: active.event,
                    image: self.image.clone(),
                    serial: self.serial,
                    metrics: self.metrics.clone(),
                    bounce: vec![0u8; CHUNK + ALIGN],
                }) as Box<dyn EventHandler>
            })
            .collect())
    }
}

impl VirtioDevice for Block {
    fn device_type(&self) -> u32 {
        VIRTIO_ID_BLOCK
    }

    fn queue_max_sizes(&self) -> Vec<u16> {
        vec![self.options.queue_size; usize::from(self.options.num_queues)]
    }

    fn worker_count(&self) -> usize {
        usize::from(self.options.num_queues)
    }

    fn features(&self) -> u64 {
        let mut f = (1u64 << VIRTIO_F_VERSION_1)
            | (1u64 << VIRTIO_BLK_F_FLUSH)
            | (1u64 << VIRTIO_BLK_F_SEG_MAX)
            | (1u64 << VIRTIO_BLK_F_SIZE_MAX);
        if self.options.readonly {
            f |= 1u64 << VIRTIO_BLK_F_RO;
        }
        if self.options.num_queues > 1 {
            f |= 1u64 << VIRTIO_BLK_F_MQ;
        }
        f
    }

    fn read_config(&self, offset: u64, data: &mut [u8]) {
        super::read_config_from_slice(&self.config_space(), offset, data);
    }

    fn write_config(&mut self, offset: u64, data: &[u8]) {
        ignored_config_write(
            &self.metrics.config_writes,
            "block",
            offset,
            data,
            "only writeback is writable, with CONFIG_WCE, not offered",
        );
    }

    fn activate(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Box<dyn EventHandler>, ActivateError> {
        super::single_worker(self.servers(mem, interrupt, queues)?, "queues")
    }

    fn activate_workers(
        &mut self,
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        queues: Vec<ActiveQueue>,
    ) -> Result<Vec<Box<dyn EventHandler>>, ActivateError> {
        self.servers(mem, interrupt, queues)
    }

    fn counters(&self) -> Arc<dyn DeviceCounters> {
        self.metrics.clone()
    }
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The chain is malformed (direction, lengths, memory).
    Bad(&'static str),
    /// A well-formed request the device refuses or the host failed.
    Io(&'static str),
    /// A request type the device does not implement.
    Unsupported,
}

/// The device thread's state: serves requests.
struct Server {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    /// Which queue this thread serves (its interrupt vector).
    index: u16,
    queue: Queue,
    queue_evt: EventFd,
    image: Arc<Image>,
    serial: [u8; VIRTIO_BLK_ID_BYTES as usize],
    metrics: Arc<BlockMetrics>,
    bounce: Vec<u8>,
}

impl EventHandler for Server {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        vec![(self.queue_evt.as_raw_fd(), QUEUE_TOKEN)]
    }

    fn start(&mut self, _ctx: &mut LoopContext<'_>) {
        self.process();
    }

    fn event(&mut self, _token: u64, _ctx: &mut LoopContext<'_>) {
        let _ = self.queue_evt.read();
        self.process();
    }
}

impl Server {
    /// Serves available requests until the ring is empty or
    /// [`BATCH_BYTES`] were moved; in the latter case it signals its own
    /// queue eventfd to come back after the epoll loop has looked for a
    /// kill. Returns how many requests were completed.
    fn process(&mut self) -> usize {
        let mut done = 0;
        let mut budget = BATCH_BYTES;
        while let Some((head, parsed)) = ChainBuffers::pop(&mut self.queue, &self.mem) {
            if let Ok(b) = &parsed {
                let moved = b.readable_len().saturating_add(b.writable_len());
                budget = budget.saturating_sub(moved);
            }
            let used = match parsed {
                Ok(buffers) => self.serve(&buffers),
                Err(e) => {
                    self.count_bad(&e.to_string());
                    0
                }
            };
            if let Err(e) = self.queue.add_used(&self.mem, head, used) {
                self.count_bad(&format!("adding used buffer {head}: {e}"));
                continue;
            }
            done += 1;
            if budget == 0 {
                if let Err(e) = self.queue_evt.write(1) {
                    warn!("block: re-arming the queue after a full batch: {e}");
                }
                break;
            }
        }
        if done > 0 && self.queue.needs_notification(&self.mem).unwrap_or(true) {
            if let Err(e) = self
                .interrupt
                .trigger(VirtioInterruptType::Queue(self.index))
            {
                warn!("block: raising the queue interrupt: {e}");
            }
        }
        done
    }

    fn count_bad(&self, why: &str) {
        guest_fault(
            &self.metrics.bad_requests,
            "block",
            format_args!("malformed request: {why}"),
        );
    }

    /// Serves one request; returns the used length (bytes written to the chain).
    fn serve(&mut self, b: &ChainBuffers) -> u32 {
        // The status byte is the last writable byte; without one there is
        // no way to answer.
        let Some(status_at) = b.writable_len().checked_sub(1) else {
            self.count_bad("no writable status byte");
            return 0;
        };
        let data_bytes = (b.readable_len().saturating_sub(HEADER_LEN)).max(status_at);
        if data_bytes > MAX_REQUEST_BYTES {
            guest_fault(
                &self.metrics.oversized_requests,
                "block",
                format_args!(
                    "refusing a {data_bytes}-byte request (the limit is {MAX_REQUEST_BYTES})"
                ),
            );
            return match b.write_at(&self.mem, status_at, &[VIRTIO_BLK_S_IOERR as u8]) {
                Ok(()) => 1,
                Err(_) => 0,
            };
        }
        let (status, data) = match self.execute(b, status_at) {
            Ok(data) => (VIRTIO_BLK_S_OK, data),
            Err(Failure::Bad(why)) => {
                self.count_bad(why);
                (VIRTIO_BLK_S_IOERR, 0)
            }
            Err(Failure::Io(why)) => {
                if self.metrics.io_errors.fetch_add(1, Ordering::Relaxed) == 0 {
                    warn!("block: request failed: {why} (further ones only counted)");
                }
                (VIRTIO_BLK_S_IOERR, 0)
            }
            Err(Failure::Unsupported) => {
                self.metrics.unsupported.fetch_add(1, Ordering::Relaxed);
                (VIRTIO_BLK_S_UNSUPP, 0)
            }
        };
        if b.write_at(&self.mem, status_at, &[status as u8]).is_err() {
            self.count_bad("status byte outside guest memory");
            return 0;
        }
        data.saturating_add(1)
    }

    /// Runs the request; returns the data bytes written into the chain.
    fn execute(&mut self, b: &ChainBuffers, data_len_w: u64) -> Result<u32, Failure> {
        let mut hdr = [0u8; HEADER_LEN as usize];
        b.read_at(&self.mem, 0, &mut hdr)
            .map_err(|_| Failure::Bad("request shorter than its 16-byte header"))?;
        let kind = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
        let sector = u64::from_le_bytes([
            hdr[8], hdr[9], hdr[10], hdr[11], hdr[12], hdr[13], hdr[14], hdr[15],
        ]);
        let data_len_r = b.readable_len() - HEADER_LEN;
        match kind {
            VIRTIO_BLK_T_IN => {
                if data_len_r != 0 {
                    return Err(Failure::Bad("read request with device-readable data"));
                }
                self.read(b, sector, data_len_w)
            }
            VIRTIO_BLK_T_OUT => {
                if data_len_w != 0 {
                    return Err(Failure::Bad("write request with device-writable data"));
                }
                if self.image.readonly {
                    return Err(Failure::Io("write to a read-only disk"));
                }
                self.write(b, sector, data_len_r)
            }
            VIRTIO_BLK_T_FLUSH => {
                if data_len_r != 0 || data_len_w != 0 {
                    return Err(Failure::Bad("flush request with data"));
                }
                self.image
                    .file
                    .sync_data()
                    .map_err(|_| Failure::Io("fdatasync of the image failed"))?;
                self.metrics.flush_ops.fetch_add(1, Ordering::Relaxed);
                Ok(0)
            }
            VIRTIO_BLK_T_GET_ID => {
                if data_len_r != 0 {
                    return Err(Failure::Bad("get-id request with device-readable data"));
                }
                // The driver's buffer is 20 bytes; a shorter one gets a prefix.
                let n = (data_len_w as usize).min(self.serial.len());
                b.write_at(&self.mem, 0, &self.serial[..n])
                    .map_err(|_| Failure::Bad("get-id buffer outside guest memory"))?;
                Ok(n as u32)
            }
            _ => Err(Failure::Unsupported),
        }
    }

    /// Byte offset of `len` bytes at `sector`, if they lie inside the image.
    fn range(&self, sector: u64, len: u64) -> Result<u64, Failure> {
        if !len.is_multiple_of(SECTOR_SIZE) {
            return Err(Failure::Bad("data length is not a whole number of sectors"));
        }
        let end = sector
            .checked_add(len / SECTOR_SIZE)
            .ok_or(Failure::Io("sector number overflows"))?;
        if end > self.image.sectors {
            return Err(Failure::Io("access beyond the end of the disk"));
        }
        Ok(sector * SECTOR_SIZE)
    }

    fn read(&mut self, b: &ChainBuffers, sector: u64, len: u64) -> Result<u32, Failure> {
        let base = self.range(sector, len)?;
        let off = self.bounce.as_ptr().align_offset(ALIGN).min(ALIGN);
        let mut done = 0u64;
        while done < len {
            let n = ((len - done) as usize).min(CHUNK);
            let buf = &mut self.bounce[off..off + n];
            self.image
                .file
                .read_exact_at(buf, base + done)
                .map_err(|_| Failure::Io("reading the image failed"))?;
            b.write_at(&self.mem, done, buf)
                .map_err(|_| Failure::Bad("read buffer outside guest memory"))?;
            done += n as u64;
        }
        self.metrics.read_ops.fetch_add(1, Ordering::Relaxed);
        self.metrics.read_bytes.fetch_add(len, Ordering::Relaxed);
        // The chain iterator caps a chain at 2^32 - 1 bytes.
        Ok(u32::try_from(len).unwrap_or(u32::MAX))
    }

    fn write(&mut self, b: &ChainBuffers, sector: u64, len: u64) -> Result<u32, Failure> {
        let base = self.range(sector, len)?;
        let off = self.bounce.as_ptr().align_offset(ALIGN).min(ALIGN);
        let mut done = 0u64;
        while done < len {
            let n = ((len - done) as usize).min(CHUNK);
            let buf = &mut self.bounce[off..off + n];
            b.read_at(&self.mem, HEADER_LEN + done, buf)
                .map_err(|_| Failure::Bad("write buffer outside guest memory"))?;
            self.image
                .file
                .write_all_at(buf, base + done)
                .map_err(|_| Failure::Io("writing the image failed"))?;
            done += n as u64;
        }
        self.metrics.write_ops.fetch_add(1, Ordering::Relaxed);
        self.metrics.write_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(0)
    }
}

/// `(size_max, seg_max)` for a queue of `queue_size` entries: seg_max
/// leaves room for the header and status descriptors, and size_max keeps
/// seg_max x size_max within [`MAX_REQUEST_BYTES`].
fn segment_limits(queue_size: u16) -> (u32, u32) {
    let cap = u32::try_from(MAX_REQUEST_BYTES).unwrap_or(u32::MAX);
    let seg_max = u32::from(queue_size.saturating_sub(2)).clamp(1, cap / MIN_SEGMENT);
    let size_max = (cap / seg_max / MIN_SEGMENT * MIN_SEGMENT).max(MIN_SEGMENT);
    (size_max, seg_max)
}

#[cfg(test)]
mod tests;
