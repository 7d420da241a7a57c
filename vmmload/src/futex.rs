//! futex(2): relayed on the calling vCPU's own host thread onto the host
//! address of the futex word. All guest threads are threads of vmmload, so
//! `FUTEX_PRIVATE_FLAG` keeps its meaning, and no vmmload lock is held while
//! a call blocks: a wait blocks only its own thread, a wake reaches the
//! waiter directly. Pointers are translated like every relayed pointer
//! (EFAULT for a byte that is not a present user page).

use crate::mm::{MmError, USER_END};
use crate::process::Process;
use crate::relay;
use crate::sys::Action;

const FUTEX_NR: u64 = 202;
const PRIVATE_FLAG: u64 = 0x80;
const CMD_MASK: u64 = 0x7f;

// Operations (FUTEX_CMD_MASK values).
const WAIT: u64 = 0;
const WAKE: u64 = 1;
const REQUEUE: u64 = 3;
const CMP_REQUEUE: u64 = 4;
const WAKE_OP: u64 = 5;
const LOCK_PI: u64 = 6;
const UNLOCK_PI: u64 = 7;
const TRYLOCK_PI: u64 = 8;
const WAIT_BITSET: u64 = 9;
const WAKE_BITSET: u64 = 10;
const WAIT_REQUEUE_PI: u64 = 11;
const CMP_REQUEUE_PI: u64 = 12;
const LOCK_PI2: u64 = 13;

fn errno(e: i32) -> Action {
    Action::Return(-(e as i64))
}

/// Whether the timeout argument (4th) is a `struct timespec` pointer.
fn has_timeout(cmd: u64) -> bool {
    matches!(
        cmd,
        WAIT | WAIT_BITSET | LOCK_PI | WAIT_REQUEUE_PI | LOCK_PI2
    )
}

/// Whether the 5th argument is a second futex word.
fn has_second_word(cmd: u64) -> bool {
    matches!(
        cmd,
        REQUEUE | CMP_REQUEUE | WAKE_OP | WAIT_REQUEUE_PI | CMP_REQUEUE_PI
    )
}

fn is_known(cmd: u64) -> bool {
    matches!(
        cmd,
        WAIT | WAKE
            | REQUEUE
            | CMP_REQUEUE
            | WAKE_OP
            | LOCK_PI
            | UNLOCK_PI
            | TRYLOCK_PI
            | WAIT_BITSET
            | WAKE_BITSET
            | WAIT_REQUEUE_PI
            | CMP_REQUEUE_PI
            | LOCK_PI2
    )
}

/// Handles futex(uaddr, op, val, timeout|val2, uaddr2, val3).
pub fn futex(p: &Process, a: &[u64; 6]) -> Action {
    let op = a[1];
    let cmd = op & CMD_MASK;
    if !is_known(cmd) {
        return errno(libc::ENOSYS);
    }
    if !a[0].is_multiple_of(4) {
        return errno(libc::EINVAL);
    }
    let mut args = *a;
    let mut ts = [0u8; 16];
    {
        let mm = p.mm.lock().expect("mm lock");
        let word =
            |g: u64| -> Result<u64, MmError> { Ok(mm.translate(g, 4, false)?[0].ptr as u64) };
        args[0] = match word(a[0]) {
            Ok(h) => h,
            // Linux keys a private futex by its address without touching
            // it: a wake at an unmapped user address wakes nobody.
            Err(MmError::Fault)
                if op & PRIVATE_FLAG != 0
                    && matches!(cmd, WAKE | WAKE_BITSET)
                    && a[0] < USER_END =>
            {
                return Action::Return(0)
            }
            Err(e) => return errno(e.errno()),
        };
        if has_timeout(cmd) && a[3] != 0 {
            match mm.read_bytes(a[3], 16) {
                Ok(b) => ts.copy_from_slice(&b),
                Err(e) => return errno(e.errno()),
            }
            args[3] = ts.as_ptr() as u64;
        }
        if has_second_word(cmd) {
            args[4] = match word(a[4]) {
                Ok(h) => h,
                Err(e) => return errno(e.errno()),
            };
        }
    }
    Action::Return(relay::host_syscall(FUTEX_NR, &args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_kinds_follow_the_operation() {
        assert!(has_timeout(WAIT) && has_timeout(WAIT_BITSET) && has_timeout(LOCK_PI));
        assert!(!has_timeout(WAKE) && !has_timeout(CMP_REQUEUE));
        // REQUEUE/CMP_REQUEUE pass a count, not a timeout, in the 4th argument.
        assert!(has_second_word(CMP_REQUEUE) && has_second_word(WAKE_OP));
        assert!(!has_second_word(WAIT) && !has_second_word(WAKE));
        assert!(is_known(LOCK_PI2) && !is_known(2) && !is_known(14) && !is_known(127));
    }
}
