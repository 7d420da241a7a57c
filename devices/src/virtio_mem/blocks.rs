//! Which blocks of a virtio-mem region are plugged, and the rules of the
//! guest's requests on them (virtio 1.2 section 5.15.6). Pure bookkeeping:
//! releasing host memory is the caller's job, so every rule is testable
//! without a VM.

/// A request the driver sent, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// `VIRTIO_MEM_REQ_PLUG` of `nb_blocks` blocks at `addr`.
    Plug {
        /// Guest physical address of the first block.
        addr: u64,
        /// Number of blocks.
        nb_blocks: u16,
    },
    /// `VIRTIO_MEM_REQ_UNPLUG`.
    Unplug {
        /// Guest physical address of the first block.
        addr: u64,
        /// Number of blocks.
        nb_blocks: u16,
    },
    /// `VIRTIO_MEM_REQ_UNPLUG_ALL`.
    UnplugAll,
    /// `VIRTIO_MEM_REQ_STATE`.
    State {
        /// Guest physical address of the first block.
        addr: u64,
        /// Number of blocks.
        nb_blocks: u16,
    },
    /// A request type the specification does not define.
    Unknown(u16),
}

/// `VIRTIO_MEM_REQ_*` type values.
pub mod req {
    /// Plug blocks.
    pub const PLUG: u16 = 0;
    /// Unplug blocks.
    pub const UNPLUG: u16 = 1;
    /// Unplug every block.
    pub const UNPLUG_ALL: u16 = 2;
    /// Ask the state of blocks.
    pub const STATE: u16 = 3;
}

/// Size of `struct virtio_mem_req`.
pub const REQUEST_LEN: usize = 24;
/// Size of `struct virtio_mem_resp`.
pub const RESPONSE_LEN: usize = 10;

impl Request {
    /// Decodes `struct virtio_mem_req` (little endian).
    pub fn parse(raw: &[u8; REQUEST_LEN]) -> Self {
        let u16_at = |o: usize| u16::from_le_bytes([raw[o], raw[o + 1]]);
        let mut addr = [0u8; 8];
        addr.copy_from_slice(&raw[8..16]);
        let addr = u64::from_le_bytes(addr);
        let nb_blocks = u16_at(16);
        match u16_at(0) {
            req::PLUG => Self::Plug { addr, nb_blocks },
            req::UNPLUG => Self::Unplug { addr, nb_blocks },
            req::UNPLUG_ALL => Self::UnplugAll,
            req::STATE => Self::State { addr, nb_blocks },
            other => Self::Unknown(other),
        }
    }
}

/// The device's answer (`VIRTIO_MEM_RESP_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response {
    /// Done; for a state request, with the blocks' state.
    Ack(Option<BlockState>),
    /// Refused for now: plugging beyond the requested size.
    Nack,
    /// The device is busy (never sent here).
    Busy,
    /// A malformed request: misaligned, outside the usable region, no
    /// blocks, or blocks not in the state the request needs.
    Error,
}

impl Response {
    /// Encodes `struct virtio_mem_resp`.
    pub fn to_bytes(self) -> [u8; RESPONSE_LEN] {
        let (ty, state) = match self {
            Self::Ack(state) => (0u16, state.map_or(0, |s| s as u16)),
            Self::Nack => (1, 0),
            Self::Busy => (2, 0),
            Self::Error => (3, 0),
        };
        let mut out = [0u8; RESPONSE_LEN];
        out[0..2].copy_from_slice(&ty.to_le_bytes());
        out[8..10].copy_from_slice(&state.to_le_bytes());
        out
    }
}

/// `VIRTIO_MEM_STATE_*`: the state of a range of blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Every block is plugged.
    Plugged = 0,
    /// No block is plugged.
    Unplugged = 1,
    /// Some are.
    Mixed = 2,
}

/// Why a request was answered with an error, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Address not a multiple of the block size, or no blocks.
    Misaligned,
    /// The range leaves the usable region (or overflows).
    OutsideRegion,
    /// Plugging past the requested size (NACK).
    BeyondRequested,
    /// Plugging a plugged block or unplugging an unplugged one.
    WrongState,
    /// An undefined request type.
    UnknownType,
}

/// What the caller must do to the host memory behind a request that was
/// accepted, before [`Blocks::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing (state request).
    None,
    /// Blocks `first..first + count` become plugged.
    Plug {
        /// First block index.
        first: u64,
        /// Number of blocks.
        count: u64,
    },
    /// Blocks `first..first + count` become unplugged: release their
    /// host memory first.
    Unplug {
        /// First block index.
        first: u64,
        /// Number of blocks.
        count: u64,
    },
    /// Every block becomes unplugged: release the plugged ones.
    UnplugAll,
}

/// The plug state of a region: one bit per block.
#[derive(Clone, Debug)]
pub struct Blocks {
    addr: u64,
    block_size: u64,
    count: u64,
    bits: Vec<u64>,
    plugged: u64,
    requested: u64,
}

impl Blocks {
    /// A region of `region_size` bytes at guest address `addr`, all
    /// unplugged. `block_size` must be a power of two dividing both.
    pub fn new(addr: u64, region_size: u64, block_size: u64) -> Self {
        let count = region_size / block_size;
        Self {
            addr,
            block_size,
            count,
            bits: vec![0; count.div_ceil(64) as usize],
            plugged: 0,
            requested: 0,
        }
    }

    /// Guest physical start of the region.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Bytes per block.
    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Size of the region in bytes.
    pub fn region_size(&self) -> u64 {
        self.count * self.block_size
    }

    /// Bytes plugged.
    pub fn plugged_size(&self) -> u64 {
        self.plugged * self.block_size
    }

    /// Bytes the host asks the guest to have plugged.
    pub fn requested_size(&self) -> u64 {
        self.requested * self.block_size
    }

    /// Sets the requested size (a multiple of the block size, at most the
    /// region; checked by the caller, clamped here).
    pub fn set_requested(&mut self, bytes: u64) {
        self.requested = (bytes / self.block_size).min(self.count);
    }

    /// Whether block `i` is plugged.
    pub fn is_plugged(&self, i: u64) -> bool {
        i < self.count && self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    /// Indices of the plugged blocks, in runs `(first, count)`.
    pub fn plugged_runs(&self) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut i = 0;
        while i < self.count {
            if self.is_plugged(i) {
                let first = i;
                while i < self.count && self.is_plugged(i) {
                    i += 1;
                }
                runs.push((first, i - first));
            } else {
                i += 1;
            }
        }
        runs
    }

    /// Guest physical address of block `i`.
    pub fn block_addr(&self, i: u64) -> u64 {
        self.addr + i * self.block_size
    }

    /// Decides a request without changing anything: the answer, and for an
    /// accepted plug or unplug the change to carry out.
    pub fn decide(&self, request: Request) -> Result<(Response, Change), Refusal> {
        match request {
            Request::Plug { addr, nb_blocks } => {
                let (first, count) = self.range(addr, nb_blocks)?;
                if self.plugged + count > self.requested {
                    return Err(Refusal::BeyondRequested);
                }
                if self.state_of(first, count) != BlockState::Unplugged {
                    return Err(Refusal::WrongState);
                }
                Ok((Response::Ack(None), Change::Plug { first, count }))
            }
            Request::Unplug { addr, nb_blocks } => {
                let (first, count) = self.range(addr, nb_blocks)?;
                if self.state_of(first, count) != BlockState::Plugged {
                    return Err(Refusal::WrongState);
                }
                Ok((Response::Ack(None), Change::Unplug { first, count }))
            }
            Request::UnplugAll => Ok((Response::Ack(None), Change::UnplugAll)),
            Request::State { addr, nb_blocks } => {
                let (first, count) = self.range(addr, nb_blocks)?;
                Ok((
                    Response::Ack(Some(self.state_of(first, count))),
                    Change::None,
                ))
            }
            Request::Unknown(_) => Err(Refusal::UnknownType),
        }
    }

    /// Records a change [`Blocks::decide`] returned, once the host memory
    /// is dealt with.
    pub fn commit(&mut self, change: Change) {
        match change {
            Change::None => {}
            Change::Plug { first, count } => self.set(first, count, true),
            Change::Unplug { first, count } => self.set(first, count, false),
            Change::UnplugAll => {
                self.bits.fill(0);
                self.plugged = 0;
            }
        }
    }

    /// Block range of a request: aligned, at least one block, inside the
    /// region.
    fn range(&self, addr: u64, nb_blocks: u16) -> Result<(u64, u64), Refusal> {
        let offset = addr.checked_sub(self.addr).ok_or(Refusal::OutsideRegion)?;
        if nb_blocks == 0 || !offset.is_multiple_of(self.block_size) {
            return Err(Refusal::Misaligned);
        }
        let first = offset / self.block_size;
        let count = u64::from(nb_blocks);
        match first.checked_add(count) {
            Some(end) if end <= self.count => Ok((first, count)),
            _ => Err(Refusal::OutsideRegion),
        }
    }

    fn state_of(&self, first: u64, count: u64) -> BlockState {
        let plugged = (first..first + count)
            .filter(|&i| self.is_plugged(i))
            .count() as u64;
        match plugged {
            0 => BlockState::Unplugged,
            n if n == count => BlockState::Plugged,
            _ => BlockState::Mixed,
        }
    }

    fn set(&mut self, first: u64, count: u64, plugged: bool) {
        for i in first..first + count {
            let (word, bit) = ((i / 64) as usize, 1u64 << (i % 64));
            let was = self.bits[word] & bit != 0;
            if was == plugged {
                continue;
            }
            if plugged {
                self.bits[word] |= bit;
                self.plugged += 1;
            } else {
                self.bits[word] &= !bit;
                self.plugged -= 1;
            }
        }
    }
}
