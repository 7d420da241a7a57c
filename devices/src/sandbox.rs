//! How device threads are started confined.
//!
//! A thread inherits its creator's seccomp filters, so a device thread
//! started by the VMM thread (or a vCPU) could only use what that thread's
//! filter allows too, and that filter would have to allow what devices
//! need. Instead the VMM installs a [`SandboxHook`] and a spawner thread,
//! started after the process-wide filter and before the main thread narrows
//! its own; the spawner enters its own filter (the hook, with
//! [`SPAWNER_THREAD`]), which allows what device threads need and thread
//! creation. [`spawn`] hands the new thread to the spawner, the new thread
//! enters its own sandbox (the hook, keyed by thread name) before it runs
//! anything else, and the caller learns whether that worked. Without an
//! installed hook (tests, fuzzing) threads start directly and unconfined.

use std::io;
use std::sync::mpsc::{self, Sender};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// Confines the calling thread according to its name (for example a
/// seccomp filter per thread kind).
pub type SandboxHook = Box<dyn Fn(&str) -> io::Result<()> + Send + Sync>;

type Job = Box<dyn FnOnce() + Send>;

struct Sandbox {
    hook: SandboxHook,
    spawner: Mutex<Sender<Job>>,
}

static SANDBOX: OnceLock<Sandbox> = OnceLock::new();

/// Name of the spawner thread, as passed to the hook.
pub const SPAWNER_THREAD: &str = "device-spawner";

/// Installs `hook` for every thread started with [`spawn`] and starts the
/// spawner thread, which calls `hook(SPAWNER_THREAD)` first. Call once, from
/// the thread whose confinement device threads should inherit, before any
/// device is activated.
pub fn install(hook: SandboxHook) -> io::Result<()> {
    let (tx, rx) = mpsc::channel::<Job>();
    SANDBOX
        .set(Sandbox {
            hook,
            spawner: Mutex::new(tx),
        })
        .map_err(|_| io::Error::other("the device sandbox is already installed"))?;
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name(SPAWNER_THREAD.into())
        .spawn(move || {
            let entered = enter(SPAWNER_THREAD);
            let ok = entered.is_ok();
            let _ = ready_tx.send(entered);
            if ok {
                for job in rx {
                    job();
                }
            }
        })?;
    ready_rx
        .recv()
        .map_err(|_| io::Error::other("the device spawner thread died"))?
}

/// Confines the calling thread as `name` if a hook is installed.
pub fn enter(name: &str) -> io::Result<()> {
    match SANDBOX.get() {
        Some(s) => (s.hook)(name),
        None => Ok(()),
    }
}

/// Starts `f` on a new thread named `name`, confined by the installed hook
/// before `f` runs. Fails (and `f` never runs) if the thread cannot be
/// started or confined. The thread's result is None only in that case.
pub fn spawn<T, F>(name: &str, f: F) -> io::Result<JoinHandle<Option<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let Some(sandbox) = SANDBOX.get() else {
        return std::thread::Builder::new()
            .name(name.into())
            .spawn(move || Some(f()));
    };
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    let name = name.to_owned();
    let job: Job = Box::new(move || {
        let _ = reply_tx.send(start_confined(name, f));
    });
    sandbox
        .spawner
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .send(job)
        .map_err(|_| io::Error::other("the device spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the device spawner thread died"))?
}

/// Runs on the spawner: starts the thread and waits until it is confined.
fn start_confined<T, F>(name: String, f: F) -> io::Result<JoinHandle<Option<T>>>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    let thread_name = name.clone();
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        let entered = enter(&thread_name);
        let ok = entered.is_ok();
        let _ = ready_tx.send(entered);
        ok.then(f)
    })?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(handle),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(io::Error::other(
                "the new thread died before it was confined",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// Names the hook saw, per thread. The hook is process-wide and other
    /// tests in this binary start device threads too: it lets every name
    /// but "refused" through.
    fn hook(name: &str) -> io::Result<()> {
        match name {
            "refused" => Err(io::Error::other("no filter for this thread")),
            _ => {
                SEEN.with(|s| s.set(true));
                Ok(())
            }
        }
    }

    thread_local! {
        static SEEN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    #[test]
    fn threads_enter_the_sandbox_first_and_a_refusal_stops_them() {
        // Another test may have installed it already: same hook.
        let _ = install(Box::new(hook));
        let h = spawn("virtio-test", || SEEN.with(|s| s.get())).unwrap();
        assert_eq!(
            h.join().unwrap(),
            Some(true),
            "the hook ran on the new thread"
        );
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let e = spawn("refused", move || r.store(true, Ordering::SeqCst)).unwrap_err();
        assert!(e.to_string().contains("no filter"), "{e}");
        assert!(!ran.load(Ordering::SeqCst), "the body ran unconfined");
        assert!(install(Box::new(hook)).is_err(), "installed twice");
    }
}
