//! The one loop every device thread runs.
//!
//! A [`DeviceLoop`] is a thread (started confined, see [`crate::sandbox`])
//! that sleeps in epoll. It is created idle, with the device, by whoever
//! owns the device (the VMM's device manager), and is driven by messages
//! through a [`LoopHandle`]:
//!
//! * **activate** hands it an [`EventHandler`] (the device's data path:
//!   queues, guest memory, interrupt). The loop watches the handler's file
//!   descriptors and calls it when they are ready, and on its timer.
//! * **reset** drops the handler on the device thread. The sender never
//!   waits for the thread: [`LoopHandle::wait_reset`] waits for the
//!   acknowledgement, with a bound the caller chooses.
//! * **pause** parks the thread: no handler code (so no guest-memory
//!   access and no interrupt from it) runs until **resume**. Work that
//!   arrives meanwhile stays in its eventfd and is served after resume.
//!   [`LoopHandle::pause`] returns once the thread is parked.
//! * **kill** ends the thread (dropping the [`DeviceLoop`] sends it).
//!
//! Commands are looked at before every handler call, so a handler that
//! bounds its own batches (see block's `BATCH_BYTES`) bounds how long a
//! pause, reset or kill can wait.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use log::{error, warn};
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

/// Largest token a handler may use; the ones above are the loop's own.
pub const MAX_HANDLER_TOKEN: u64 = u64::MAX - 16;
/// Token of the eventfd that says "a command is waiting".
const COMMAND_TOKEN: u64 = u64::MAX;

/// A device's data path, run on its device thread.
pub trait EventHandler: Send + 'static {
    /// Descriptors to watch for input, with the token [`EventHandler::event`]
    /// receives for each (at most [`MAX_HANDLER_TOKEN`]).
    fn watch(&self) -> Vec<(RawFd, u64)>;
    /// Runs once the loop has the handler and is not paused: serve work
    /// the driver posted before activation.
    fn start(&mut self, ctx: &mut LoopContext<'_>);
    /// A watched descriptor is ready.
    fn event(&mut self, token: u64, ctx: &mut LoopContext<'_>);
    /// The timer set with [`LoopContext::set_timer`] expired.
    fn timer(&mut self, _ctx: &mut LoopContext<'_>) {}
    /// Runs on the device thread just before a reset or kill drops the
    /// handler.
    fn stop(&mut self) {}
}

/// What a handler may change about its loop.
pub struct LoopContext<'a> {
    epoll: &'a Epoll,
    timer: &'a mut Option<Timer>,
}

impl<'a> LoopContext<'a> {
    /// A context over `epoll` outside a loop, for driving a handler
    /// directly in tests.
    #[cfg(test)]
    pub(crate) fn detached(epoll: &'a Epoll, timer: &'a mut Option<Timer>) -> Self {
        Self { epoll, timer }
    }

    /// The loop's epoll, to change the interest in one of the handler's
    /// [`EventHandler::watch`] descriptors (EPOLL_CTL_MOD). Adding or
    /// removing descriptors is the loop's job.
    pub fn epoll(&self) -> &Epoll {
        self.epoll
    }

    /// Calls [`EventHandler::timer`] every `period` from now on (None:
    /// never). A paused loop does not fire its timer; a timer that expired
    /// while paused fires once after resume.
    pub fn set_timer(&mut self, period: Option<Duration>) {
        *self.timer = period.map(|period| Timer {
            period,
            next: Instant::now() + period,
        });
    }
}

pub(crate) struct Timer {
    period: Duration,
    next: Instant,
}

enum Command {
    Activate(Box<dyn EventHandler>),
    DrainOnReset(Vec<EventFd>),
    /// With its ticket.
    Reset(u64),
    Pause(SyncSender<()>),
    Resume,
    Kill,
}

/// State the thread shares with its handles.
#[derive(Default)]
struct Shared {
    /// Resets acknowledged by the thread.
    resets_done: Mutex<u64>,
    reset_cv: Condvar,
    resets_requested: AtomicU64,
    /// Handler calls (start, events, timers): every guest-memory access
    /// and interrupt of a device happens inside one.
    handler_calls: AtomicU64,
    activations: AtomicU64,
    /// An activation the thread could not carry out (a descriptor it
    /// could not watch); cleared by the next reset.
    failed: AtomicBool,
    paused: AtomicBool,
}

impl Shared {
    /// Records that every reset up to `ticket` is done and wakes waiters.
    fn ack_reset(&self, ticket: u64) {
        let mut done = self.resets_done.lock().unwrap_or_else(|p| p.into_inner());
        *done = (*done).max(ticket);
        self.reset_cv.notify_all();
    }
}

/// The owner of a device thread: dropping it stops the thread and waits
/// for it.
pub struct DeviceLoop {
    handle: LoopHandle,
    thread: Option<JoinHandle<Option<()>>>,
}

impl DeviceLoop {
    /// Starts an idle loop on a thread named `name` (the name picks the
    /// thread's sandbox, see [`crate::sandbox`]).
    pub fn spawn(name: &str) -> io::Result<Self> {
        let epoll = Epoll::new()?;
        let wake = Arc::new(EventFd::new(libc::EFD_NONBLOCK)?);
        epoll.ctl(
            ControlOperation::Add,
            wake.as_raw_fd(),
            EpollEvent::new(EventSet::IN, COMMAND_TOKEN),
        )?;
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let handle = LoopHandle {
            tx,
            wake: wake.clone(),
            shared: shared.clone(),
            workers: Vec::new(),
        };
        let label = name.to_owned();
        let thread = crate::sandbox::spawn(name, move || {
            Runner {
                label,
                epoll,
                wake,
                rx,
                shared,
                handler: None,
                started: false,
                paused: false,
                timer: None,
                drain: Vec::new(),
                generation: 0,
            }
            .run()
        })?;
        Ok(Self {
            handle,
            thread: Some(thread),
        })
    }

    /// A handle to send the loop commands.
    pub fn handle(&self) -> LoopHandle {
        self.handle.clone()
    }
}

impl Drop for DeviceLoop {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            if self.handle.send(Command::Kill).is_err() {
                // The thread is already gone.
            }
            if t.join().is_err() {
                error!("a device thread panicked");
            }
        }
    }
}

/// Sends commands to a [`DeviceLoop`]. Cheap to clone; no method waits
/// for the device thread except [`LoopHandle::pause`] and
/// [`LoopHandle::wait_reset`], both with a bound.
#[derive(Clone)]
pub struct LoopHandle {
    tx: Sender<Command>,
    wake: Arc<EventFd>,
    shared: Arc<Shared>,
    /// The other threads of a multiqueue device, in order (see
    /// [`LoopHandle::with_workers`]).
    workers: Vec<LoopHandle>,
}

impl LoopHandle {
    /// This loop as thread 0 of a device served by several threads
    /// (`VirtioDevice::worker_count`), `workers` being threads 1, 2, ...:
    /// the transport activates, resets and fails them together.
    pub fn with_workers(mut self, workers: Vec<LoopHandle>) -> Self {
        self.workers = workers;
        self
    }

    /// The other threads given with [`LoopHandle::with_workers`].
    pub fn workers(&self) -> &[LoopHandle] {
        &self.workers
    }

    fn send(&self, cmd: Command) -> io::Result<()> {
        self.tx
            .send(cmd)
            .map_err(|_| io::Error::other("the device thread is gone"))?;
        self.wake.write(1)
    }

    /// Hands the loop a freshly activated data path.
    pub fn activate(&self, handler: Box<dyn EventHandler>) -> io::Result<()> {
        self.send(Command::Activate(handler))
    }

    /// Gives the thread the transport's notification eventfds: a reset
    /// empties them (on the device thread, so the caller never reads a
    /// descriptor), dropping what the old driver left behind.
    pub fn drain_on_reset(&self, notifiers: Vec<EventFd>) -> io::Result<()> {
        self.send(Command::DrainOnReset(notifiers))
    }

    /// Asks the thread to drop its handler; returns a ticket for
    /// [`LoopHandle::wait_reset`] and [`LoopHandle::reset_done`].
    pub fn reset(&self) -> u64 {
        let ticket = self.shared.resets_requested.fetch_add(1, Ordering::SeqCst) + 1;
        if let Err(e) = self.send(Command::Reset(ticket)) {
            // No thread, no handler: the reset is trivially done.
            warn!("device reset: {e}");
            self.shared.ack_reset(ticket);
        }
        ticket
    }

    /// Whether the reset with `ticket` has been carried out.
    pub fn reset_done(&self, ticket: u64) -> bool {
        *self
            .shared
            .resets_done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            >= ticket
    }

    /// Waits at most `bound` for the reset with `ticket`; returns whether
    /// it was carried out.
    pub fn wait_reset(&self, ticket: u64, bound: Duration) -> bool {
        let done = self
            .shared
            .resets_done
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (done, _) = self
            .shared
            .reset_cv
            .wait_timeout_while(done, bound, |d| *d < ticket)
            .unwrap_or_else(|p| p.into_inner());
        *done >= ticket
    }

    /// Whether the last activation failed on the device thread.
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::SeqCst)
    }

    /// Parks the thread and returns once it is parked, or fails after
    /// `bound` (the thread then parks as soon as its handler returns).
    pub fn pause(&self, bound: Duration) -> io::Result<()> {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        self.send(Command::Pause(ack_tx))?;
        match ack_rx.recv_timeout(bound) {
            Ok(()) => Ok(()),
            // The thread is gone: nothing runs.
            Err(mpsc::RecvTimeoutError::Disconnected) => Ok(()),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the device thread did not park within {bound:?}"),
            )),
        }
    }

    /// Lets a paused thread run again.
    pub fn resume(&self) -> io::Result<()> {
        self.send(Command::Resume)
    }

    /// Whether the thread is parked.
    pub fn is_paused(&self) -> bool {
        self.shared.paused.load(Ordering::SeqCst)
    }

    /// The loop's counters: handler calls, activations, resets.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = &self.shared;
        vec![
            ("handler_calls", s.handler_calls.load(Ordering::Relaxed)),
            ("activations", s.activations.load(Ordering::Relaxed)),
            (
                "resets",
                *s.resets_done.lock().unwrap_or_else(|p| p.into_inner()),
            ),
        ]
    }
}

/// The device thread's side.
struct Runner {
    label: String,
    epoll: Epoll,
    wake: Arc<EventFd>,
    rx: Receiver<Command>,
    shared: Arc<Shared>,
    handler: Option<Box<dyn EventHandler>>,
    /// Whether `start` ran for the current handler.
    started: bool,
    paused: bool,
    timer: Option<Timer>,
    /// Emptied by every reset (see [`LoopHandle::drain_on_reset`]).
    drain: Vec<EventFd>,
    /// Bumped whenever the handler changes, so events gathered for the old
    /// one are not delivered to the new one.
    generation: u64,
}

impl Runner {
    fn run(mut self) {
        let mut events = [EpollEvent::default(); 16];
        loop {
            if !self.drain_commands() {
                break;
            }
            if self.paused {
                // Parked: only a command can wake the thread.
                match self.rx.recv() {
                    Ok(cmd) => {
                        if !self.apply(cmd) {
                            break;
                        }
                    }
                    Err(_) => break,
                }
                continue;
            }
            let timeout = self.timer_timeout();
            let n = match self.epoll.wait(timeout, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error!(
                        "{}: epoll_wait failed, stopping the device thread: {e}",
                        self.label
                    );
                    break;
                }
            };
            let generation = self.generation;
            for ev in &events[..n] {
                if ev.data() == COMMAND_TOKEN {
                    let _ = self.wake.read();
                    continue;
                }
                // A kill, pause or reset wins over work that is ready.
                if !self.drain_commands() {
                    self.drop_handler();
                    return;
                }
                if self.paused || self.generation != generation {
                    break;
                }
                self.call(|h, ctx| h.event(ev.data(), ctx));
            }
            if !self.paused
                && self
                    .timer
                    .as_ref()
                    .is_some_and(|t| Instant::now() >= t.next)
            {
                if let Some(t) = &mut self.timer {
                    t.next = Instant::now() + t.period;
                }
                self.call(|h, ctx| h.timer(ctx));
            }
        }
        self.drop_handler();
    }

    fn timer_timeout(&self) -> i32 {
        match (&self.timer, &self.handler) {
            (Some(t), Some(_)) => {
                let ms = t
                    .next
                    .saturating_duration_since(Instant::now())
                    .as_millis()
                    // Round up so the timer is due when epoll returns.
                    .saturating_add(1);
                i32::try_from(ms).unwrap_or(i32::MAX)
            }
            _ => -1,
        }
    }

    /// Calls the handler, if any, with a context.
    fn call(&mut self, f: impl FnOnce(&mut dyn EventHandler, &mut LoopContext<'_>)) {
        let Some(h) = self.handler.as_deref_mut() else {
            return;
        };
        self.shared.handler_calls.fetch_add(1, Ordering::Relaxed);
        let mut ctx = LoopContext {
            epoll: &self.epoll,
            timer: &mut self.timer,
        };
        f(h, &mut ctx);
    }

    /// Applies every waiting command; false means stop the thread.
    fn drain_commands(&mut self) -> bool {
        loop {
            match self.rx.try_recv() {
                Ok(cmd) => {
                    if !self.apply(cmd) {
                        return false;
                    }
                }
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn apply(&mut self, cmd: Command) -> bool {
        match cmd {
            Command::Activate(handler) => self.activate(handler),
            Command::DrainOnReset(notifiers) => self.drain = notifiers,
            Command::Reset(ticket) => {
                self.drop_handler();
                for evt in &self.drain {
                    // Empty already (EAGAIN) is the usual case.
                    let _ = evt.read();
                }
                self.shared.failed.store(false, Ordering::SeqCst);
                self.shared.ack_reset(ticket);
            }
            Command::Pause(ack) => {
                self.paused = true;
                self.shared.paused.store(true, Ordering::SeqCst);
                let _ = ack.send(());
            }
            Command::Resume => {
                self.paused = false;
                self.shared.paused.store(false, Ordering::SeqCst);
                self.start_if_ready();
            }
            Command::Kill => {
                self.drop_handler();
                return false;
            }
        }
        true
    }

    fn activate(&mut self, handler: Box<dyn EventHandler>) {
        if self.handler.is_some() {
            error!(
                "{}: activated twice without a reset; keeping the running data path",
                self.label
            );
            return;
        }
        let watch = handler.watch();
        let mut added = Vec::new();
        for &(fd, token) in &watch {
            let res = if token > MAX_HANDLER_TOKEN {
                Err(io::Error::other(format!("token {token:#x} is reserved")))
            } else {
                self.epoll.ctl(
                    ControlOperation::Add,
                    fd,
                    EpollEvent::new(EventSet::IN, token),
                )
            };
            if let Err(e) = res {
                error!("{}: watching descriptor {fd}: {e}", self.label);
                for &fd in &added {
                    let _ = self
                        .epoll
                        .ctl(ControlOperation::Delete, fd, EpollEvent::default());
                }
                self.shared.failed.store(true, Ordering::SeqCst);
                return;
            }
            added.push(fd);
        }
        self.handler = Some(handler);
        self.generation += 1;
        self.started = false;
        self.shared.activations.fetch_add(1, Ordering::Relaxed);
        self.start_if_ready();
    }

    fn start_if_ready(&mut self) {
        if !self.paused && !self.started && self.handler.is_some() {
            self.started = true;
            self.call(|h, ctx| h.start(ctx));
        }
    }

    fn drop_handler(&mut self) {
        if let Some(mut h) = self.handler.take() {
            h.stop();
            for (fd, _) in h.watch() {
                let _ = self
                    .epoll
                    .ctl(ControlOperation::Delete, fd, EpollEvent::default());
            }
        }
        self.timer = None;
        self.started = false;
        self.generation += 1;
    }
}

#[cfg(test)]
mod tests;
