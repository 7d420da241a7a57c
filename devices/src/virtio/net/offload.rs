//! Checksum and segmentation offloads (virtio 1.2 section 5.1.6.2): which
//! fields of the 12-byte virtio-net header may pass between the guest and
//! the TAP, which speaks the same header (`IFF_VNET_HDR`).
//!
//! Offered as upstream Cloud Hypervisor offers them, less ECN and UFO:
//! partial checksums and TSO both ways. What the driver accepts decides
//!
//! * TX (guest to host): the header's checksum request (`CSUM`) and its
//!   GSO fields (`HOST_TSO4/6`, only with `CSUM`, as the specification
//!   requires) reach the TAP, whose kernel side checks them like any
//!   packet socket's (`virtio_net_hdr_to_skb`); what was not negotiated is
//!   cleared, so a guest cannot ask the host for work it did not agree to;
//! * RX (host to guest): the TAP is told with `TUNSETOFFLOAD` what the
//!   guest takes (`GUEST_CSUM`, `GUEST_TSO4/6`) and then hands over
//!   unchecksummed and up-to-64-KiB frames, which the header describes.
//!   A guest that negotiated TSO without mergeable buffers posts 64 KiB
//!   receive buffers (Linux's "big packets"); with them (offered always)
//!   a large frame spans several page-sized buffers.
//!
//! Without any of them every frame is a plain, checksummed Ethernet frame.

use virtio_bindings::virtio_net::{
    VIRTIO_NET_F_CSUM, VIRTIO_NET_F_GUEST_CSUM, VIRTIO_NET_F_GUEST_TSO4, VIRTIO_NET_F_GUEST_TSO6,
    VIRTIO_NET_F_HOST_TSO4, VIRTIO_NET_F_HOST_TSO6,
};

use crate::virtio::tap::VNET_HDR_LEN;

// `TUNSETOFFLOAD` flags (linux/if_tun.h).
const TUN_F_CSUM: u32 = 0x01;
const TUN_F_TSO4: u32 = 0x02;
const TUN_F_TSO6: u32 = 0x04;

/// Header bytes: flags (0), then gso_type (1), hdr_len (2-3), gso_size
/// (4-5), csum_start (6-7), csum_offset (8-9), num_buffers (10-11).
const FLAGS: usize = 0;
const GSO: std::ops::Range<usize> = 1..6;
const CSUM: std::ops::Range<usize> = 6..10;
const NUM_BUFFERS: std::ops::Range<usize> = 10..12;

const fn bit(b: u32) -> u64 {
    1u64 << b
}

const CSUM_BITS: u64 = bit(VIRTIO_NET_F_CSUM) | bit(VIRTIO_NET_F_GUEST_CSUM);
const TSO_BITS: u64 = bit(VIRTIO_NET_F_GUEST_TSO4)
    | bit(VIRTIO_NET_F_GUEST_TSO6)
    | bit(VIRTIO_NET_F_HOST_TSO4)
    | bit(VIRTIO_NET_F_HOST_TSO6);
/// Every offload feature the device can offer.
pub const OFFERED: u64 = CSUM_BITS | TSO_BITS;

/// The offload features offered for the NIC's `offload_csum` and
/// `offload_tso` (TSO needs checksums, so it goes with them).
pub fn offered(csum: bool, tso: bool) -> u64 {
    match (csum, tso) {
        (false, _) => 0,
        (true, false) => CSUM_BITS,
        (true, true) => OFFERED,
    }
}

/// What the driver accepted, as header rules for one queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offloads {
    /// The guest may ask for a checksum (`VIRTIO_NET_HDR_F_NEEDS_CSUM`).
    tx_csum: bool,
    /// The guest may send TSO frames (GSO fields).
    tx_gso: bool,
    /// What the TAP may hand over (`TUNSETOFFLOAD` flags).
    tun_flags: u32,
}

impl Offloads {
    /// The rules for the features the driver accepted.
    pub fn from_features(acked: u64) -> Self {
        let has = |b: u32| acked & bit(b) != 0;
        let tx_csum = has(VIRTIO_NET_F_CSUM);
        let tx_gso = tx_csum && (has(VIRTIO_NET_F_HOST_TSO4) || has(VIRTIO_NET_F_HOST_TSO6));
        let mut tun_flags = 0;
        // TSO towards the guest needs partial checksums too (the TAP
        // refuses TSO flags without TUN_F_CSUM).
        if has(VIRTIO_NET_F_GUEST_CSUM) {
            tun_flags |= TUN_F_CSUM;
            if has(VIRTIO_NET_F_GUEST_TSO4) {
                tun_flags |= TUN_F_TSO4;
            }
            if has(VIRTIO_NET_F_GUEST_TSO6) {
                tun_flags |= TUN_F_TSO6;
            }
        }
        Self {
            tx_csum,
            tx_gso,
            tun_flags,
        }
    }

    /// The `TUNSETOFFLOAD` argument.
    pub fn tun_flags(&self) -> u32 {
        self.tun_flags
    }

    /// Clears what the guest's header asks for and was not negotiated.
    pub fn filter_tx(&self, hdr: &mut [u8]) {
        let Some(hdr) = hdr.get_mut(..VNET_HDR_LEN) else {
            return;
        };
        if !self.tx_csum {
            hdr[FLAGS] = 0;
            hdr[CSUM].fill(0);
        }
        if !self.tx_gso {
            hdr[GSO].fill(0);
        }
    }

    /// Prepares the TAP's header for the guest: `num_buffers` receive
    /// buffers hold the frame (1 without mergeable buffers, where the
    /// field is still part of the 12-byte VERSION_1 header), and with no
    /// offload towards the guest nothing but that.
    pub fn fill_rx(&self, hdr: &mut [u8], num_buffers: u16) {
        let Some(hdr) = hdr.get_mut(..VNET_HDR_LEN) else {
            return;
        };
        if self.tun_flags == 0 {
            hdr[..NUM_BUFFERS.start].fill(0);
        }
        hdr[NUM_BUFFERS].copy_from_slice(&num_buffers.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HDR: [u8; 12] = [1, 4, 54, 0, 0xa8, 5, 34, 0, 16, 0, 9, 9];

    #[test]
    fn nothing_negotiated_clears_every_request() {
        let o = Offloads::from_features(0);
        assert_eq!(o.tun_flags(), 0);
        let mut h = HDR;
        o.filter_tx(&mut h);
        assert_eq!(&h[..10], &[0; 10]);
        let mut h = HDR;
        o.fill_rx(&mut h, 1);
        assert_eq!(h, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn everything_negotiated_passes_the_header() {
        let o = Offloads::from_features(OFFERED);
        assert_eq!(o.tun_flags(), TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6);
        let mut h = HDR;
        o.filter_tx(&mut h);
        assert_eq!(h, HDR);
        let mut h = HDR;
        o.fill_rx(&mut h, 1);
        assert_eq!(&h[..10], &HDR[..10]);
        assert_eq!(&h[10..], &[1, 0]);
        // Mergeable buffers: the count, little-endian.
        o.fill_rx(&mut h, 0x0203);
        assert_eq!(&h[..10], &HDR[..10]);
        assert_eq!(&h[10..], &[3, 2]);
    }

    #[test]
    fn tso_without_checksums_is_not_honoured() {
        // A driver that accepts TSO but not checksums breaks the spec's
        // rule; neither direction then gets segmentation.
        let o = Offloads::from_features(
            bit(VIRTIO_NET_F_HOST_TSO4)
                | bit(VIRTIO_NET_F_GUEST_TSO4)
                | bit(VIRTIO_NET_F_GUEST_TSO6),
        );
        assert_eq!(o.tun_flags(), 0);
        let mut h = HDR;
        o.filter_tx(&mut h);
        assert_eq!(&h[..10], &[0; 10]);
    }

    #[test]
    fn checksums_without_tso_clear_only_the_gso_fields() {
        let o = Offloads::from_features(bit(VIRTIO_NET_F_CSUM) | bit(VIRTIO_NET_F_GUEST_CSUM));
        assert_eq!(o.tun_flags(), TUN_F_CSUM);
        let mut h = HDR;
        o.filter_tx(&mut h);
        assert_eq!(h[0], 1);
        assert_eq!(&h[1..6], &[0; 5]);
        assert_eq!(&h[6..10], &HDR[6..10]);
    }

    #[test]
    fn the_nic_switches_choose_what_is_offered() {
        assert_eq!(offered(true, true), OFFERED);
        assert_eq!(offered(true, false), CSUM_BITS);
        assert_eq!(offered(false, true), 0, "TSO without checksums");
        assert_eq!(offered(false, false), 0);
    }

    #[test]
    fn short_headers_are_left_alone() {
        let o = Offloads::from_features(0);
        let mut h = [7u8; 5];
        o.filter_tx(&mut h);
        o.fill_rx(&mut h, 1);
        assert_eq!(h, [7; 5]);
    }
}
