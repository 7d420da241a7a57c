//! Host console input for the guest's UART (`--serial tty`).
//!
//! One thread reads stdin for the life of the process, but each boot of the
//! VM builds a new UART: a reboot (the guest's, or `vm.reboot`) drops the
//! old one. The thread therefore delivers through a [`SerialInputRoute`],
//! which the VMM points at the current VM's UART on every boot. It holds
//! that UART weakly, so a dropped VM's device (and its watchdog) goes away,
//! and input typed while no VM runs waits for the next boot instead of
//! vanishing into a device nobody reads.

use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use devices::legacy::SerialDevice;

/// The UART that host input currently goes to.
#[derive(Clone, Default)]
pub struct SerialInputRoute {
    inner: Arc<(Mutex<Weak<Mutex<SerialDevice>>>, Condvar)>,
}

impl SerialInputRoute {
    /// Sends input to `dev` from now on (called on every boot).
    pub fn attach(&self, dev: &Arc<Mutex<SerialDevice>>) {
        let (slot, changed) = &*self.inner;
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(dev);
        changed.notify_all();
    }

    /// The live UART, waiting (without bound: the reader has nothing else
    /// to do) until a VM with one runs.
    fn current(&self) -> Arc<Mutex<SerialDevice>> {
        let (slot, changed) = &*self.inner;
        let mut weak = slot.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(dev) = weak.upgrade() {
                return dev;
            }
            weak = changed.wait(weak).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Delivers all of `bytes` to whichever UART is current, retrying while
    /// its 64-byte receive FIFO is full (the guest drains it at its pace;
    /// the UART has no event for "room again").
    pub fn deliver(&self, bytes: &[u8]) {
        let mut sent = 0;
        while sent < bytes.len() {
            let dev = self.current();
            sent += dev
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .enqueue_input(&bytes[sent..]);
            if sent < bytes.len() {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
}

/// Copies `input` to the route until it ends.
pub fn forward(mut input: impl Read, route: &SerialInputRoute) {
    let mut buf = [0u8; 64];
    loop {
        match input.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => route.deliver(&buf[..n]),
        }
    }
}

/// Starts the stdin reader (once per process). The thread is detached: it
/// blocks in read(2) and dies with the process.
pub fn spawn_stdin_forwarder(route: SerialInputRoute) {
    let spawned = std::thread::Builder::new()
        .name("serial-in".into())
        .spawn(move || {
            if !crate::console::confined("serial-in") {
                return;
            }
            forward(std::io::stdin(), &route);
        });
    if let Err(e) = spawned {
        log::warn!("serial input disabled: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use devices::IrqTrigger;

    const DATA: u64 = 0;
    const IER: u64 = 1;

    fn uart() -> Arc<Mutex<SerialDevice>> {
        let irq = IrqTrigger::new().expect("eventfd");
        let dev = SerialDevice::new(irq, Box::new(std::io::sink()));
        let dev = Arc::new(Mutex::new(dev));
        devices::BusDevice::write(&mut *dev.lock().expect("lock"), IER, &[1]);
        dev
    }

    /// A route attached to a fresh UART, as at a boot.
    fn attached() -> (SerialInputRoute, Arc<Mutex<SerialDevice>>) {
        let route = SerialInputRoute::default();
        let dev = uart();
        route.attach(&dev);
        (route, dev)
    }

    /// A reader thread forwarding `bytes` through `route`, as stdin's.
    fn reader(route: &SerialInputRoute, bytes: &[u8]) -> std::thread::JoinHandle<()> {
        let route = route.clone();
        let bytes = bytes.to_vec();
        std::thread::spawn(move || forward(&bytes[..], &route))
    }

    fn drain(dev: &Arc<Mutex<SerialDevice>>, n: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut d = dev.lock().expect("lock");
        for _ in 0..n {
            let mut b = [0u8];
            devices::BusDevice::read(&mut *d, DATA, &mut b);
            out.push(b[0]);
        }
        out
    }

    #[test]
    fn input_after_a_reboot_reaches_the_new_uart() {
        let (route, first) = attached();
        forward(&b"boot1\n"[..], &route);
        assert_eq!(drain(&first, 6), b"boot1\n");
        // The reboot: the old VM's UART is dropped, a new one attached.
        drop(first);
        let second = uart();
        route.attach(&second);
        forward(&b"tb-ack\n"[..], &route);
        assert_eq!(drain(&second, 7), b"tb-ack\n");
    }

    #[test]
    fn input_while_no_vm_runs_waits_for_the_next_boot() {
        let (route, first) = attached();
        drop(first);
        let typed = reader(&route, b"typed early\n");
        // The reader cannot deliver yet; the next boot's UART gets it all.
        let second = uart();
        route.attach(&second);
        typed.join().expect("reader");
        assert_eq!(drain(&second, 12), b"typed early\n");
    }

    #[test]
    fn a_full_fifo_is_retried_not_dropped() {
        let (route, dev) = attached();
        let input: Vec<u8> = (0..200u8).collect();
        let feed = reader(&route, &input);
        let mut got = Vec::new();
        while got.len() < input.len() {
            let ready = {
                let mut d = dev.lock().expect("lock");
                let mut lsr = [0u8];
                devices::BusDevice::read(&mut *d, 5, &mut lsr);
                lsr[0] & 1 != 0
            };
            if ready {
                got.extend(drain(&dev, 1));
            } else {
                std::thread::yield_now();
            }
        }
        feed.join().expect("reader");
        assert_eq!(got, input);
    }
}
