//! `--api-socket path=<p>|fd=<n>`: where the HTTP server listens.

use std::io;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;

use option_parser::{OptionParser, OptionParserError};

/// The API socket: a path to bind, or an already listening socket
/// inherited as a file descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiSocket {
    /// Bind a new UNIX socket at this path.
    Path(PathBuf),
    /// Use this listening UNIX socket; ownership passes to the server.
    Fd(RawFd),
}

/// A `--api-socket` value that cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApiSocketError {
    /// The option string is malformed.
    #[error("--api-socket: {0}")]
    Option(#[from] OptionParserError),
    /// Neither or both of `path` and `fd`.
    #[error("--api-socket: give exactly one of path=<socket_path> or fd=<fd>")]
    PathXorFd,
    /// An empty path.
    #[error("--api-socket: empty path")]
    EmptyPath,
}

impl ApiSocket {
    /// The syntax, reused as the `--api-socket` help text.
    pub const SYNTAX: &'static str =
        "HTTP API socket: path=<socket_path> or fd=<fd> (a bare path is taken as path=)";

    /// Parses `path=<p>`, `fd=<n>` or a bare path (no `=` in it).
    ///
    /// ```
    /// use api::ApiSocket;
    /// assert_eq!(ApiSocket::parse("/run/ch.sock").unwrap(), ApiSocket::Path("/run/ch.sock".into()));
    /// assert_eq!(ApiSocket::parse("path=/run/ch.sock").unwrap(), ApiSocket::Path("/run/ch.sock".into()));
    /// assert_eq!(ApiSocket::parse("fd=3").unwrap(), ApiSocket::Fd(3));
    /// assert!(ApiSocket::parse("fd=x").is_err());
    /// ```
    pub fn parse(input: &str) -> Result<Self, ApiSocketError> {
        if input.is_empty() {
            return Err(ApiSocketError::EmptyPath);
        }
        if !input.contains('=') {
            return Ok(Self::Path(PathBuf::from(input)));
        }
        let mut parser = OptionParser::new();
        parser.add("path").add("fd");
        parser.parse(input)?;
        let fd: Option<RawFd> = parser.convert("fd")?;
        let path = parser.get("path");
        match (path, fd) {
            (Some(""), None) => Err(ApiSocketError::EmptyPath),
            (Some(p), None) => Ok(Self::Path(PathBuf::from(p))),
            (None, Some(fd)) if fd >= 0 => Ok(Self::Fd(fd)),
            (None, Some(fd)) => Err(OptionParserError::InvalidValue {
                key: "fd".into(),
                value: fd.to_string(),
                reason: "negative file descriptor".into(),
            }
            .into()),
            _ => Err(ApiSocketError::PathXorFd),
        }
    }

    /// Binds (or adopts) the listening socket. A stale socket file left by
    /// a dead process is replaced; a live one is `AddrInUse`.
    pub(crate) fn listen(&self) -> io::Result<UnixListener> {
        match self {
            Self::Path(path) => {
                if let Ok(meta) = std::fs::symlink_metadata(path) {
                    if !meta.file_type().is_socket() {
                        return Err(io::Error::new(
                            io::ErrorKind::AlreadyExists,
                            format!("{} exists and is not a socket", path.display()),
                        ));
                    }
                    match UnixStream::connect(path) {
                        Ok(_) => {
                            return Err(io::Error::new(
                                io::ErrorKind::AddrInUse,
                                format!("{} is in use by another server", path.display()),
                            ))
                        }
                        Err(_) => std::fs::remove_file(path)?,
                    }
                }
                UnixListener::bind(path)
            }
            Self::Fd(fd) => adopt_listening_fd(*fd),
        }
    }
}

impl FromStr for ApiSocket {
    type Err = ApiSocketError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Takes ownership of `fd` after checking it is an open UNIX stream socket
/// (wrapping a closed or foreign fd would later close someone else's file).
fn adopt_listening_fd(fd: RawFd) -> io::Result<UnixListener> {
    let mut domain: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `domain`, a c_int
    // we own; an invalid fd only makes it fail with EBADF/ENOTSOCK.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_DOMAIN,
            (&mut domain as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    if domain != libc::AF_UNIX {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("fd {fd} is not a UNIX socket"),
        ));
    }
    // SAFETY: fd is an open socket (checked above) and the caller handed
    // it over with `--api-socket fd=`, so we become its only owner.
    let listener = unsafe { UnixListener::from_raw_fd(fd) };
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn parses_path_fd_and_bare_path() {
        assert_eq!(
            ApiSocket::parse("path=/tmp/a.sock"),
            Ok(ApiSocket::Path("/tmp/a.sock".into()))
        );
        assert_eq!(ApiSocket::parse("fd=7"), Ok(ApiSocket::Fd(7)));
        assert_eq!(
            ApiSocket::parse("/tmp/b.sock"),
            Ok(ApiSocket::Path("/tmp/b.sock".into()))
        );
    }

    #[test]
    fn rejects_both_neither_bad_and_unknown_keys() {
        assert_eq!(
            ApiSocket::parse("path=/a,fd=3"),
            Err(ApiSocketError::PathXorFd)
        );
        assert!(ApiSocket::parse("fd=-1").is_err());
        assert!(ApiSocket::parse("fd=three").is_err());
        assert!(ApiSocket::parse("socket=/a").is_err());
        assert_eq!(ApiSocket::parse(""), Err(ApiSocketError::EmptyPath));
        assert_eq!(ApiSocket::parse("path="), Err(ApiSocketError::EmptyPath));
    }

    #[test]
    fn adopting_a_non_socket_fd_fails_without_taking_it() {
        let file = std::fs::File::open("/dev/null").unwrap();
        let fd = file.into_raw_fd();
        assert!(ApiSocket::Fd(fd).listen().is_err());
        // SAFETY: fd came from into_raw_fd above and was not adopted.
        drop(unsafe { std::fs::File::from_raw_fd(fd) });
        assert!(ApiSocket::Fd(1_000_000).listen().is_err());
    }

    #[test]
    fn a_live_socket_path_is_in_use_and_a_stale_one_is_replaced() {
        let dir = vmm_sys_util::tempdir::TempDir::new().unwrap();
        let path = dir.as_path().join("api.sock");
        let live = UnixListener::bind(&path).unwrap();
        let err = ApiSocket::Path(path.clone()).listen().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        drop(live); // the file stays behind, nobody listens
        assert!(path.exists());
        ApiSocket::Path(path.clone()).listen().unwrap();
        let plain = dir.as_path().join("plain");
        std::fs::write(&plain, b"x").unwrap();
        assert!(ApiSocket::Path(plain).listen().is_err());
    }
}
