//! The device thread's side: requests from the queue, checked against the
//! bitmap, unplugged memory released on the host, responses back.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use log::warn;
use vm_memory::{GuestAddress, GuestMemoryBackend};
use vmm_sys_util::eventfd::EventFd;

use super::blocks::{Change, Refusal, Request, Response, REQUEST_LEN, RESPONSE_LEN};
use super::Shared;
use crate::event_loop::{EventHandler, LoopContext};
use crate::virtio::chain::ChainBuffers;
use crate::virtio::fault::guest_fault;
use crate::virtio::{
    ActiveQueue, GuestMemoryMmap, Queue, QueueT, VirtioInterrupt, VirtioInterruptType,
};

const QUEUE_TOKEN: u64 = 0;

/// The data path of an active device.
pub(super) struct RequestPath {
    mem: GuestMemoryMmap,
    interrupt: Arc<dyn VirtioInterrupt>,
    queue: Queue,
    queue_evt: EventFd,
    shared: Arc<Shared>,
    file: Option<Arc<File>>,
    file_offset: u64,
}

impl RequestPath {
    pub(super) fn new(
        mem: GuestMemoryMmap,
        interrupt: Arc<dyn VirtioInterrupt>,
        active: ActiveQueue,
        shared: Arc<Shared>,
        file: Option<Arc<File>>,
        file_offset: u64,
    ) -> Self {
        Self {
            mem,
            interrupt,
            queue: active.queue,
            queue_evt: active.event,
            shared,
            file,
            file_offset,
        }
    }

    /// Serves every available request; returns how many chains were used.
    pub(super) fn process(&mut self) -> usize {
        let mut done = 0;
        while let Some((head, parsed)) = ChainBuffers::pop(&mut self.queue, &self.mem) {
            let written = match parsed {
                Ok(chain) => self.serve(&chain),
                Err(e) => {
                    self.fault(
                        &self.shared.metrics.bad_descriptors,
                        format_args!("unusable request chain: {e}"),
                    );
                    0
                }
            };
            if let Err(e) = self.queue.add_used(&self.mem, head, written) {
                self.fault(
                    &self.shared.metrics.bad_descriptors,
                    format_args!("adding used buffer {head}: {e}"),
                );
                break;
            }
            done += 1;
        }
        if done > 0 && self.queue.needs_notification(&self.mem).unwrap_or(true) {
            if let Err(e) = self.interrupt.trigger(VirtioInterruptType::Queue(0)) {
                warn!("virtio-mem: raising the queue interrupt: {e}");
            }
        }
        done
    }

    /// The queue's next used index, for tests.
    #[cfg(test)]
    pub(super) fn queue_next_used(&self) -> u16 {
        self.queue.next_used()
    }

    fn fault(&self, counter: &AtomicU64, what: std::fmt::Arguments<'_>) {
        guest_fault(counter, "virtio-mem", what);
    }

    /// One request: returns the bytes written into the chain.
    fn serve(&self, chain: &ChainBuffers) -> u32 {
        let m = &self.shared.metrics;
        if chain.readable_len() < REQUEST_LEN as u64 || chain.writable_len() < RESPONSE_LEN as u64 {
            self.fault(
                &m.bad_descriptors,
                format_args!(
                    "request chain of {} readable / {} writable bytes is too short",
                    chain.readable_len(),
                    chain.writable_len()
                ),
            );
            return 0;
        }
        let mut raw = [0u8; REQUEST_LEN];
        if chain.read_at(&self.mem, 0, &mut raw).is_err() {
            self.fault(&m.bad_descriptors, format_args!("request unreadable"));
            return 0;
        }
        let request = Request::parse(&raw);
        let decision = self.shared.blocks().decide(request);
        let response = match decision {
            Err(refusal) => self.refuse(request, refusal),
            Ok((response, change)) => self.carry_out(response, change),
        };
        if chain.write_at(&self.mem, 0, &response.to_bytes()).is_err() {
            self.fault(&m.bad_descriptors, format_args!("response unwritable"));
            return 0;
        }
        RESPONSE_LEN as u32
    }

    fn refuse(&self, request: Request, refusal: Refusal) -> Response {
        let m = &self.shared.metrics;
        let counter = match refusal {
            Refusal::BeyondRequested => {
                // The driver races a shrink; not a fault.
                m.nacks.fetch_add(1, Ordering::Relaxed);
                return Response::Nack;
            }
            Refusal::Misaligned => &m.bad_alignment,
            Refusal::OutsideRegion => &m.bad_range,
            Refusal::WrongState => &m.bad_state,
            Refusal::UnknownType => &m.bad_type,
        };
        self.fault(counter, format_args!("{request:?} refused: {refusal:?}"));
        Response::Error
    }

    /// Releases what an accepted request unplugs, then records it. Only
    /// this thread changes the bitmap, so the decision still holds.
    fn carry_out(&self, response: Response, change: Change) -> Response {
        let m = &self.shared.metrics;
        let released = match change {
            Change::None => {
                m.state_requests.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Change::Plug { .. } => {
                m.plug_requests.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Change::Unplug { first, count } => {
                m.unplug_requests.fetch_add(1, Ordering::Relaxed);
                self.release(first, count)
            }
            Change::UnplugAll => {
                m.unplug_all_requests.fetch_add(1, Ordering::Relaxed);
                let runs = self.shared.blocks().plugged_runs();
                runs.into_iter()
                    .try_for_each(|(first, count)| self.release(first, count))
            }
        };
        if let Err(e) = released {
            self.fault(
                &m.release_errors,
                format_args!("releasing unplugged memory: {e}"),
            );
            return Response::Error;
        }
        self.shared.blocks().commit(change);
        response
    }

    /// Gives the host memory of blocks `first..first + count` back: a hole
    /// in the memfd (if any), then `MADV_DONTNEED` on the mapping, so the
    /// next guest access after a later plug finds zeroes.
    fn release(&self, first: u64, count: u64) -> std::io::Result<()> {
        let (gpa, len, region_start) = {
            let b = self.shared.blocks();
            (b.block_addr(first), count * b.block_size(), b.addr())
        };
        let slice = usize::try_from(len)
            .ok()
            .and_then(|l| self.mem.get_slice(GuestAddress(gpa), l).ok())
            .ok_or_else(|| {
                std::io::Error::other(format!("{gpa:#x}+{len:#x} is not one host mapping"))
            })?;
        if let Some(f) = &self.file {
            let offset = self.file_offset + (gpa - region_start);
            // SAFETY: fallocate on a descriptor we own; no memory is passed.
            let ret = unsafe {
                libc::fallocate(
                    f.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    offset as libc::off_t,
                    len as libc::off_t,
                )
            };
            if ret != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let guard = slice.ptr_guard_mut();
        // SAFETY: the range lies inside one mapping of guest memory
        // (checked by get_slice); the guest gave it up, so dropping its
        // contents is what unplugging means.
        let ret = unsafe { libc::madvise(guard.as_ptr().cast(), slice.len(), libc::MADV_DONTNEED) };
        if ret != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

impl EventHandler for RequestPath {
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
