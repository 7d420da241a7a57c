//! The device thread: an epoll loop over the queue eventfds, a kill
//! eventfd and a control eventfd (statistics refresh requests), with a
//! timeout for periodic statistics refreshes. vCPU threads only signal
//! eventfds; all guest memory work happens here.

use std::io;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{error, warn};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

use crate::handler::BalloonHandler;

const KILL_TOKEN: u64 = u64::MAX;
const CONTROL_TOKEN: u64 = u64::MAX - 1;

/// A running device thread.
pub(crate) struct Worker {
    kill: EventFd,
    thread: Option<JoinHandle<Option<BalloonHandler>>>,
}

impl Worker {
    /// Starts the thread. `control` is signalled by the VMM thread to ask
    /// for fresh statistics; `stats_interval` asks periodically.
    pub(crate) fn spawn(
        handler: BalloonHandler,
        control: EventFd,
        stats_interval: Option<Duration>,
    ) -> io::Result<Self> {
        let kill = EventFd::new(libc::EFD_NONBLOCK)?;
        let epoll = Epoll::new()?;
        let add = |fd: i32, token: u64| {
            epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN, token),
            )
        };
        use std::os::fd::AsRawFd;
        add(kill.as_raw_fd(), KILL_TOKEN)?;
        add(control.as_raw_fd(), CONTROL_TOKEN)?;
        for (i, slot) in handler.slots.iter().enumerate() {
            add(slot.event.as_raw_fd(), i as u64)?;
        }
        let thread_kill = kill.try_clone()?;
        let thread = devices::sandbox::spawn("balloon", move || {
            run(handler, epoll, thread_kill, control, stats_interval)
        })?;
        Ok(Self {
            kill,
            thread: Some(thread),
        })
    }

    /// Stops the thread and returns its handler (None if it panicked).
    pub(crate) fn stop(mut self) -> Option<BalloonHandler> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<BalloonHandler> {
        let thread = self.thread.take()?;
        if let Err(e) = self.kill.write(1) {
            error!("balloon: signalling the device thread to stop: {e}");
        }
        match thread.join() {
            Ok(h) => h,
            Err(_) => {
                error!("balloon: the device thread panicked");
                None
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

fn run(
    mut handler: BalloonHandler,
    epoll: Epoll,
    kill: EventFd,
    control: EventFd,
    stats_interval: Option<Duration>,
) -> BalloonHandler {
    // The driver may have posted buffers before DRIVER_OK.
    handler.process_all();
    let mut next_stats = stats_interval.map(|d| Instant::now() + d);
    let mut events = vec![EpollEvent::default(); handler.slots.len() + 2];
    loop {
        let timeout = next_stats.map_or(-1, |t| {
            let ms = t.saturating_duration_since(Instant::now()).as_millis();
            i32::try_from(ms).unwrap_or(i32::MAX)
        });
        let n = match epoll.wait(timeout, &mut events) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                error!("balloon: epoll_wait failed, stopping the device thread: {e}");
                return handler;
            }
        };
        for ev in &events[..n] {
            match ev.data() {
                KILL_TOKEN => {
                    let _ = kill.read();
                    return handler;
                }
                CONTROL_TOKEN => {
                    let _ = control.read();
                    handler.request_stats();
                }
                i => {
                    let i = i as usize;
                    if let Some(slot) = handler.slots.get(i) {
                        if let Err(e) = slot.event.read() {
                            if e.kind() != io::ErrorKind::WouldBlock {
                                warn!("balloon: reading queue eventfd: {e}");
                            }
                        }
                        handler.process_slot(i);
                    }
                }
            }
        }
        if let (Some(t), Some(d)) = (next_stats, stats_interval) {
            if Instant::now() >= t {
                handler.request_stats();
                next_stats = Some(Instant::now() + d);
            }
        }
    }
}
