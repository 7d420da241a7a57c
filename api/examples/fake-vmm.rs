//! TEST-ONLY stand-in for `cloud-hypervisor --api-socket ...` without a
//! kernel: the real HTTP server and router in front of the fake VMM state
//! machine used by the integration tests. It boots nothing. It exists so
//! scripts/api-contract.sh can check the OpenAPI contract before (and
//! independently of) the real VMM.
//!
//! Usage: fake-vmm --api-socket path=<socket>|fd=<n> [--no-balloon]

#[path = "../tests/common/fake_vmm.rs"]
mod fake_vmm;

use std::process::ExitCode;

use api::{channel, start_http_server, ApiSocket};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut socket = None;
    let mut has_balloon = true;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--api-socket" => socket = it.next().cloned(),
            "--no-balloon" => has_balloon = false,
            other => {
                eprintln!("fake-vmm: unknown argument {other}");
                return ExitCode::FAILURE;
            }
        }
    }
    let Some(socket) = socket else {
        eprintln!("usage: fake-vmm --api-socket {}", ApiSocket::SYNTAX);
        return ExitCode::FAILURE;
    };
    let socket = match ApiSocket::parse(&socket) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-vmm: {e}");
            return ExitCode::FAILURE;
        }
    };
    let run = || -> std::io::Result<()> {
        let (sender, receiver) = channel()?;
        let kill_evt = EventFd::new(EFD_NONBLOCK)?;
        let server = start_http_server(socket, sender, kill_evt.try_clone()?)?;
        let options = fake_vmm::FakeOptions {
            has_balloon,
            ..Default::default()
        };
        fake_vmm::run_fake_vmm(receiver, kill_evt, options);
        server
            .join()
            .map_err(|_| std::io::Error::other("http-server thread panicked"))
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-vmm: {e}");
            ExitCode::FAILURE
        }
    }
}
