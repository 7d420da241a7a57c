//! How a virtio-pci device interrupts: the ISR/ConfigGeneration state the
//! virtio state machine keeps, then the MSI-X vector the driver assigned
//! to the configuration or to the queue.

use std::io;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use crate::pci::Msix;
use crate::virtio::{MmioInterrupt, VirtioInterrupt, VirtioInterruptType};

/// The virtio "no vector" value (virtio 1.2 section 4.1.5.1.2).
pub const NO_VECTOR: u16 = 0xffff;

/// A virtio-pci device's interrupt: per-source MSI-X vector numbers, set
/// by the driver through the common configuration structure.
#[derive(Debug)]
pub struct PciInterrupt {
    latch: Arc<MmioInterrupt>,
    msix: Arc<Msix>,
    config_vector: AtomicU16,
    queue_vectors: Vec<AtomicU16>,
}

impl PciInterrupt {
    /// An interrupt for `queues` queues, recording status in `latch` and
    /// signalling through `msix`; every source starts with [`NO_VECTOR`].
    pub(crate) fn new(latch: Arc<MmioInterrupt>, msix: Arc<Msix>, queues: usize) -> Self {
        Self {
            latch,
            msix,
            config_vector: AtomicU16::new(NO_VECTOR),
            queue_vectors: (0..queues).map(|_| AtomicU16::new(NO_VECTOR)).collect(),
        }
    }

    /// The MSI-X table and pending bits.
    pub fn msix(&self) -> &Arc<Msix> {
        &self.msix
    }

    /// The vector a vector-select write may store: an existing vector or
    /// NO_VECTOR (section 4.1.4.3: the device answers NO_VECTOR when it
    /// cannot use the one asked for).
    fn checked(&self, vector: u16) -> u16 {
        if usize::from(vector) < self.msix.table_size() {
            vector
        } else {
            NO_VECTOR
        }
    }

    /// `config_msix_vector`.
    pub(crate) fn config_vector(&self) -> u16 {
        self.config_vector.load(Ordering::SeqCst)
    }

    pub(crate) fn set_config_vector(&self, vector: u16) {
        self.config_vector
            .store(self.checked(vector), Ordering::SeqCst);
    }

    /// `queue_msix_vector` of queue `index` (NO_VECTOR for a missing queue).
    pub(crate) fn queue_vector(&self, index: usize) -> u16 {
        self.queue_vectors
            .get(index)
            .map_or(NO_VECTOR, |v| v.load(Ordering::SeqCst))
    }

    pub(crate) fn set_queue_vector(&self, index: usize, vector: u16) {
        let vector = self.checked(vector);
        if let Some(v) = self.queue_vectors.get(index) {
            v.store(vector, Ordering::SeqCst);
        }
    }

    /// A device reset forgets every vector assignment.
    pub(crate) fn reset_vectors(&self) {
        self.config_vector.store(NO_VECTOR, Ordering::SeqCst);
        for v in &self.queue_vectors {
            v.store(NO_VECTOR, Ordering::SeqCst);
        }
    }

    /// Reads and clears the ISR status (bit 0 queue, bit 1 configuration).
    pub(crate) fn take_isr(&self) -> u8 {
        // Only the two defined bits.
        (self.latch.take_status() & 0x3) as u8
    }

    /// Holds interrupts back (they stay pending in the PBA).
    pub fn hold(&self) {
        self.msix.hold();
    }

    /// Delivers what was held back.
    pub fn release(&self) -> io::Result<()> {
        self.msix.release()
    }

    /// Interrupts delivered so far.
    pub fn signalled(&self) -> u64 {
        self.msix.signalled()
    }
}

impl VirtioInterrupt for PciInterrupt {
    fn trigger(&self, int_type: VirtioInterruptType) -> io::Result<()> {
        self.latch.latch(int_type);
        let vector = match int_type {
            VirtioInterruptType::Config => self.config_vector(),
            VirtioInterruptType::Queue(i) => self.queue_vector(usize::from(i)),
        };
        self.msix.signal(vector)
    }
}
