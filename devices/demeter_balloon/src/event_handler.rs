//! The balloon's data path on its device thread: the queue eventfds, a
//! control eventfd (statistics refresh requests from the VMM thread) and a
//! timer for periodic statistics refreshes, run by the shared device loop
//! ([`devices::event_loop`]). vCPU threads only signal eventfds; all guest
//! memory work happens here.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use devices::event_loop::{EventHandler, LoopContext};
use log::warn;
use vmm_sys_util::eventfd::EventFd;

use crate::handler::BalloonHandler;

/// Token of the control eventfd; queue slots use their slot number.
const CONTROL_TOKEN: u64 = devices::event_loop::MAX_HANDLER_TOKEN;

/// What the device loop runs for an active balloon.
pub(crate) struct BalloonPath {
    pub(crate) handler: BalloonHandler,
    /// Signalled by the VMM thread to ask for fresh statistics.
    pub(crate) control: EventFd,
    pub(crate) stats_interval: Option<Duration>,
}

impl EventHandler for BalloonPath {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        let mut watch = vec![(self.control.as_raw_fd(), CONTROL_TOKEN)];
        for (i, slot) in self.handler.slots.iter().enumerate() {
            watch.push((slot.event.as_raw_fd(), i as u64));
        }
        watch
    }

    fn start(&mut self, ctx: &mut LoopContext<'_>) {
        // The driver may have posted buffers before DRIVER_OK.
        self.handler.process_all();
        ctx.set_timer(self.stats_interval);
    }

    fn event(&mut self, token: u64, _ctx: &mut LoopContext<'_>) {
        if token == CONTROL_TOKEN {
            let _ = self.control.read();
            self.handler.request_stats();
            return;
        }
        let Ok(i) = usize::try_from(token) else {
            return;
        };
        if let Some(slot) = self.handler.slots.get(i) {
            if let Err(e) = slot.event.read() {
                if e.kind() != io::ErrorKind::WouldBlock {
                    warn!("balloon: reading queue eventfd: {e}");
                }
            }
            self.handler.process_slot(i);
        }
    }

    fn timer(&mut self, _ctx: &mut LoopContext<'_>) {
        self.handler.request_stats();
    }

    fn stop(&mut self) {
        // The guest owns its memory again after a reset.
        self.handler.clear();
    }
}
