//! Host side of the consoles: unbuffered stdout for guest output, the raw
//! terminal, the UART watchdog and the virtio console's stdin reader (the
//! UART's is in [`crate::serial_input`]).

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use devices::legacy::SerialDevice;

/// Stdout that flushes every write, so prompts without a newline show up.
pub struct FlushingStdout;

impl Write for FlushingStdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = std::io::stdout().lock();
        out.write_all(buf)?;
        out.flush()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stdout().flush()
    }
}

/// Terminal settings to restore at exit.
pub struct RawTerminal {
    saved: libc::termios,
}

impl RawTerminal {
    /// Puts stdin in raw mode if it is a terminal.
    pub fn enable() -> Option<Self> {
        // SAFETY: isatty/tcgetattr/tcsetattr on fd 0 with valid pointers.
        unsafe {
            if libc::isatty(0) != 1 {
                return None;
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            // Keep output post-processing so the host terminal stays sane.
            raw.c_oflag = saved.c_oflag;
            if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
                return None;
            }
            Some(Self { saved })
        }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        // SAFETY: restoring the attributes read in enable().
        unsafe { libc::tcsetattr(0, libc::TCSANOW, &self.saved) };
    }
}

/// Enters the console helpers' seccomp filter; a thread that cannot does
/// nothing (its console loses input or the watchdog, the VM runs on).
pub(crate) fn confined(name: &str) -> bool {
    match crate::seccomp::enter(crate::seccomp::ThreadKind::ConsoleIo) {
        Ok(()) => true,
        Err(e) => {
            log::error!("{name}: {e}; the thread stops");
            false
        }
    }
}

/// How often the UART watchdog looks for interrupts the guest missed.
const SERIAL_WATCHDOG_PERIOD: Duration = Duration::from_millis(250);

/// Starts the UART watchdog (see [`SerialDevice::watchdog_tick`]). The
/// thread ends when the VM drops its UART.
pub fn spawn_serial_watchdog(serial: &Arc<Mutex<SerialDevice>>) {
    let serial = Arc::downgrade(serial);
    let spawned = std::thread::Builder::new()
        .name("serial-watchdog".into())
        .spawn(move || {
            if !confined("serial-watchdog") {
                return;
            }
            loop {
                // A periodic tick, not a wait for an event: the condition it
                // looks for is the absence of one.
                std::thread::sleep(SERIAL_WATCHDOG_PERIOD);
                let Some(serial) = serial.upgrade() else {
                    return;
                };
                serial
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .watchdog_tick();
            }
        });
    if let Err(e) = spawned {
        log::warn!("serial watchdog disabled: {e}");
    }
}

/// Whether stdin can feed a console: a terminal or a pipe (not /dev/null,
/// not a regular file a script redirected).
pub fn stdin_is_interactive() -> bool {
    // SAFETY: fstat on fd 0 into a zeroed struct.
    unsafe {
        if libc::isatty(0) == 1 {
            return true;
        }
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(0, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    }
}

/// The virtio console's input from stdin. One reader thread for the whole
/// process, so a rebooted VM's new console gets the same input.
pub fn virtio_console_stdin() -> Option<Arc<devices::virtio::ConsoleInput>> {
    static INPUT: std::sync::OnceLock<Option<Arc<devices::virtio::ConsoleInput>>> =
        std::sync::OnceLock::new();
    INPUT
        .get_or_init(|| {
            let input = match devices::virtio::ConsoleInput::new() {
                Ok(i) => Arc::new(i),
                Err(e) => {
                    log::warn!("virtio console input disabled: {e}");
                    return None;
                }
            };
            let feed = input.clone();
            let spawned = std::thread::Builder::new()
                .name("console-in".into())
                .spawn(move || {
                    if !confined("console-in") {
                        return;
                    }
                    let mut buf = [0u8; 256];
                    let mut stdin = std::io::stdin();
                    loop {
                        match stdin.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => feed.push(&buf[..n]),
                        }
                    }
                });
            if let Err(e) = spawned {
                log::warn!("virtio console input disabled: {e}");
                return None;
            }
            Some(input)
        })
        .clone()
}
