//! Guest faults are counted every time and logged once per counter, so a
//! guest that repeats a fault in a loop (config writes, broken rings)
//! cannot flood the host's log; `vm.counters` shows how many there were.

use std::sync::atomic::{AtomicU64, Ordering};

use log::warn;

/// Counts one guest fault in `counter` and logs `what` if it is the first
/// one this counter has seen. Returns the count before this fault.
pub fn guest_fault(counter: &AtomicU64, device: &str, what: std::fmt::Arguments<'_>) -> u64 {
    let before = counter.fetch_add(1, Ordering::Relaxed);
    if before == 0 {
        warn!("{device}: {what} (counted; further ones not logged)");
    }
    before
}

/// A guest write to a configuration space that takes none: counted in
/// `counter`, the first one logged with `why`.
pub fn ignored_config_write(
    counter: &AtomicU64,
    device: &str,
    offset: u64,
    data: &[u8],
    why: &str,
) {
    guest_fault(
        counter,
        device,
        format_args!(
            "ignoring a {}-byte write at config offset {offset} ({why})",
            data.len()
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_every_fault_and_reports_the_first() {
        let c = AtomicU64::new(0);
        let firsts: Vec<u64> = (0..5)
            .map(|i| guest_fault(&c, "test", format_args!("fault {i}")))
            .collect();
        assert_eq!(firsts, [0, 1, 2, 3, 4]);
        assert_eq!(c.load(Ordering::Relaxed), 5);
    }
}
