//! A device's own thread: an epoll loop over the device's file
//! descriptors plus a kill eventfd, so a reset or shutdown can stop it and
//! take its state (open files, say) back.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::thread::JoinHandle;

use log::error;
use vmm_sys_util::epoll::{ControlOperation, Epoll, EpollEvent, EventSet};
use vmm_sys_util::eventfd::EventFd;

/// Token of the kill eventfd; handlers never see it.
const KILL_TOKEN: u64 = u64::MAX;

/// What runs on the device thread.
pub(crate) trait EpollHandler: Send + 'static {
    /// Called once when the thread starts (work posted before activation).
    fn start(&mut self, epoll: &Epoll);
    /// Called for each ready descriptor registered with `token`.
    fn event(&mut self, token: u64, epoll: &Epoll);
}

/// A running device thread.
pub(crate) struct DeviceThread<S> {
    kill: EventFd,
    thread: Option<JoinHandle<Option<S>>>,
}

impl<S: EpollHandler> DeviceThread<S> {
    /// Starts `state` on a thread named `name`, watching each `(fd, token)`
    /// for input.
    pub fn spawn(name: &str, mut state: S, watch: &[(RawFd, u64)]) -> io::Result<Self> {
        let kill = EventFd::new(libc::EFD_NONBLOCK)?;
        let epoll = Epoll::new()?;
        epoll.ctl(
            ControlOperation::Add,
            kill.as_raw_fd(),
            EpollEvent::new(EventSet::IN, KILL_TOKEN),
        )?;
        for &(fd, token) in watch {
            epoll.ctl(
                ControlOperation::Add,
                fd,
                EpollEvent::new(EventSet::IN, token),
            )?;
        }
        let thread_kill = kill.try_clone()?;
        let label = name.to_owned();
        let thread = crate::sandbox::spawn(name, move || {
            state.start(&epoll);
            let mut events = [EpollEvent::default(); 8];
            loop {
                let n = match epoll.wait(-1, &mut events) {
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        error!("{label}: epoll_wait failed, stopping the device thread: {e}");
                        return state;
                    }
                };
                // A kill wins over work that became ready with it.
                if events[..n].iter().any(|ev| ev.data() == KILL_TOKEN) {
                    let _ = thread_kill.read();
                    return state;
                }
                for ev in &events[..n] {
                    state.event(ev.data(), &epoll);
                }
            }
        })?;
        Ok(Self {
            kill,
            thread: Some(thread),
        })
    }

    /// Stops the thread and returns its state (None if it panicked).
    pub fn stop(mut self) -> Option<S> {
        let thread = self.thread.take()?;
        if let Err(e) = self.kill.write(1) {
            error!("signalling a device thread to stop: {e}");
        }
        thread.join().ok().flatten()
    }
}

impl<S> Drop for DeviceThread<S> {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = self.kill.write(1);
            let _ = t.join();
        }
    }
}
