//! Pending signals of a thread or of the whole program: standard signals
//! coalesce (one instance each, as Linux), real-time signals queue up to a
//! bound, so a signal storm never grows memory without limit.

/// The 128-byte `siginfo_t` the handler receives.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SigInfo(pub [u8; 128]);

/// si_code values.
pub const SI_USER: i32 = 0;
/// tkill/tgkill.
pub const SI_TKILL: i32 = -6;

impl SigInfo {
    /// `signo` with `code`, everything else zero.
    pub fn new(signo: i32, code: i32) -> SigInfo {
        let mut b = [0u8; 128];
        b[..4].copy_from_slice(&signo.to_le_bytes());
        b[8..12].copy_from_slice(&code.to_le_bytes());
        SigInfo(b)
    }

    /// A signal sent by process `pid` of user `uid` (kill, tgkill).
    pub fn from_process(signo: i32, code: i32, pid: i32, uid: u32) -> SigInfo {
        let mut s = SigInfo::new(signo, code);
        s.0[16..20].copy_from_slice(&pid.to_le_bytes());
        s.0[20..24].copy_from_slice(&uid.to_le_bytes());
        s
    }

    /// A fault at `addr`.
    pub fn fault(signo: i32, code: i32, addr: u64) -> SigInfo {
        let mut s = SigInfo::new(signo, code);
        s.0[16..24].copy_from_slice(&addr.to_le_bytes());
        s
    }

    /// si_signo.
    pub fn signo(&self) -> i32 {
        i32::from_le_bytes([self.0[0], self.0[1], self.0[2], self.0[3]])
    }
}

impl std::fmt::Debug for SigInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigInfo({})", self.signo())
    }
}

/// Bit of signal `sig` (1..=64) in a kernel sigset.
pub fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// Most real-time signals queued per pending set (Linux bounds them by
/// RLIMIT_SIGPENDING; further ones are dropped).
pub const RT_QUEUE_MAX: usize = 4096;

/// Signals the kernel dequeues before others (synchronous faults).
const SYNCHRONOUS: u64 = (1 << 10) | (1 << 6) | (1 << 3) | (1 << 4) | (1 << 7) | (1 << 30);

/// A pending set.
#[derive(Default, Debug)]
pub struct Pending {
    /// Signals pending (kernel sigset layout).
    pub set: u64,
    infos: Vec<SigInfo>,
}

impl Pending {
    /// Adds a signal. False if it was coalesced or dropped.
    pub fn push(&mut self, info: SigInfo) -> bool {
        let sig = info.signo();
        if !(1..=64).contains(&sig) {
            return false;
        }
        if sig < 32 && self.set & bit(sig) != 0 {
            return false;
        }
        if sig >= 32 && self.infos.iter().filter(|i| i.signo() >= 32).count() >= RT_QUEUE_MAX {
            return false;
        }
        self.infos.push(info);
        self.set |= bit(sig);
        true
    }

    /// Removes the signal to deliver next among `allowed`.
    pub fn take(&mut self, allowed: u64) -> Option<SigInfo> {
        let cand = self.set & allowed;
        if cand == 0 {
            return None;
        }
        let pick = if cand & SYNCHRONOUS != 0 {
            cand & SYNCHRONOUS
        } else {
            cand
        };
        let sig = pick.trailing_zeros() as i32 + 1;
        let i = self.infos.iter().position(|x| x.signo() == sig)?;
        let info = self.infos.remove(i);
        if !self.infos.iter().any(|x| x.signo() == sig) {
            self.set &= !bit(sig);
        }
        Some(info)
    }

    /// Drops every instance of `sig` (it became ignored).
    pub fn discard(&mut self, sig: i32) {
        self.infos.retain(|x| x.signo() != sig);
        self.set &= !bit(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_signals_coalesce_and_rt_signals_queue() {
        let mut p = Pending::default();
        assert!(p.push(SigInfo::new(14, 0)));
        assert!(!p.push(SigInfo::new(14, 0)));
        assert!(p.push(SigInfo::new(40, 1)));
        assert!(p.push(SigInfo::new(40, 2)));
        assert_eq!(p.take(u64::MAX).unwrap().signo(), 14);
        assert!(p.take(bit(14)).is_none());
        assert_eq!(p.take(u64::MAX).unwrap().0[8], 1);
        assert_eq!(p.set, bit(40));
        assert_eq!(p.take(u64::MAX).unwrap().0[8], 2);
        assert_eq!(p.set, 0);
    }

    #[test]
    fn faults_first_then_lowest_number() {
        let mut p = Pending::default();
        p.push(SigInfo::new(2, 0));
        p.push(SigInfo::new(11, 0));
        p.push(SigInfo::new(1, 0));
        assert_eq!(p.take(u64::MAX).unwrap().signo(), 11);
        assert_eq!(p.take(u64::MAX).unwrap().signo(), 1);
        assert_eq!(p.take(!bit(2)), None);
    }

    #[test]
    fn a_storm_stays_bounded() {
        let mut p = Pending::default();
        for _ in 0..100_000 {
            p.push(SigInfo::new(10, 0));
            p.push(SigInfo::new(35, 0));
        }
        assert_eq!(p.infos.len(), 1 + RT_QUEUE_MAX);
        assert!(!p.push(SigInfo::new(0, 0)));
        assert!(!p.push(SigInfo::new(65, 0)));
        p.discard(35);
        assert_eq!(p.set, bit(10));
    }
}
