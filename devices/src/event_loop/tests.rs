use super::*;
use std::sync::mpsc::Receiver;

/// A handler that reports every call on a channel and, when told to,
/// blocks inside `event` until released (a request the host is slow to
/// finish).
struct Probe {
    evt: EventFd,
    calls: Sender<&'static str>,
    block: Option<Receiver<()>>,
    timer: Option<Duration>,
}

impl EventHandler for Probe {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        vec![(self.evt.as_raw_fd(), 7)]
    }
    fn start(&mut self, ctx: &mut LoopContext<'_>) {
        ctx.set_timer(self.timer);
        let _ = self.calls.send("start");
    }
    fn event(&mut self, token: u64, _ctx: &mut LoopContext<'_>) {
        assert_eq!(token, 7);
        let _ = self.evt.read();
        let _ = self.calls.send("event");
        if let Some(b) = &self.block {
            let _ = b.recv();
        }
    }
    fn timer(&mut self, _ctx: &mut LoopContext<'_>) {
        let _ = self.calls.send("timer");
    }
    fn stop(&mut self) {
        let _ = self.calls.send("stop");
    }
}

struct Setup {
    lp: DeviceLoop,
    kick: EventFd,
    calls: Receiver<&'static str>,
    release: Option<SyncSender<()>>,
}

fn setup(blocking: bool, timer: Option<Duration>) -> Setup {
    let lp = DeviceLoop::spawn("virtio-test").unwrap();
    let kick = EventFd::new(libc::EFD_NONBLOCK).unwrap();
    let (tx, calls) = mpsc::channel();
    let (release, block) = if blocking {
        let (a, b) = mpsc::sync_channel(0);
        (Some(a), Some(b))
    } else {
        (None, None)
    };
    let probe = Probe {
        evt: kick.try_clone().unwrap(),
        calls: tx,
        block,
        timer,
    };
    lp.handle().activate(Box::new(probe)).unwrap();
    assert_eq!(next(&calls), "start");
    Setup {
        lp,
        kick,
        calls,
        release,
    }
}

const WAIT: Duration = Duration::from_secs(10);
/// How long a test watches for something that must not happen.
const QUIET: Duration = Duration::from_millis(150);

fn next(calls: &Receiver<&'static str>) -> &'static str {
    calls
        .recv_timeout(WAIT)
        .expect("the handler was not called")
}

#[test]
fn a_paused_loop_serves_nothing_until_resumed() {
    let s = setup(false, None);
    let h = s.lp.handle();
    h.pause(WAIT).unwrap();
    assert!(h.is_paused());
    let before = h.counters()[0].1;
    s.kick.write(1).unwrap();
    assert!(
        s.calls.recv_timeout(QUIET).is_err(),
        "a paused device handled a notification"
    );
    assert_eq!(h.counters()[0].1, before, "handler calls while paused");
    h.resume().unwrap();
    assert_eq!(next(&s.calls), "event", "the notification was kept");
}

#[test]
fn a_timer_does_not_fire_while_paused_and_fires_once_after() {
    let s = setup(false, Some(Duration::from_millis(10)));
    let h = s.lp.handle();
    assert_eq!(next(&s.calls), "timer");
    h.pause(WAIT).unwrap();
    // A timer call that raced with the pause may still be queued.
    while s.calls.try_recv().is_ok() {}
    assert!(
        s.calls.recv_timeout(QUIET).is_err(),
        "the timer fired while paused"
    );
    h.resume().unwrap();
    assert_eq!(next(&s.calls), "timer");
}

#[test]
fn reset_returns_at_once_while_a_request_is_in_flight() {
    let mut s = setup(true, None);
    let h = s.lp.handle();
    s.kick.write(1).unwrap();
    assert_eq!(next(&s.calls), "event");
    // The handler is now stuck inside a request.
    let t0 = Instant::now();
    let ticket = h.reset();
    let bound = Duration::from_millis(20);
    assert!(!h.wait_reset(ticket, bound), "reset done while blocked");
    let waited = t0.elapsed();
    assert!(waited < bound + Duration::from_millis(500), "{waited:?}");
    assert!(!h.reset_done(ticket));
    // Pausing is bounded too.
    let e = h.pause(bound).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    s.release.take().unwrap().send(()).unwrap();
    assert!(h.wait_reset(ticket, WAIT));
    assert_eq!(next(&s.calls), "stop");
    h.pause(WAIT).unwrap();
    assert!(h.is_paused());
    // No handler after the reset: notifications go nowhere.
    h.resume().unwrap();
    s.kick.write(1).unwrap();
    assert!(s.calls.recv_timeout(QUIET).is_err());
}

#[test]
fn a_kill_stops_a_paused_or_running_loop_and_stops_the_handler() {
    for pause in [false, true] {
        let s = setup(false, None);
        if pause {
            s.lp.handle().pause(WAIT).unwrap();
        }
        let h = s.lp.handle();
        drop(s.lp);
        assert_eq!(next(&s.calls), "stop");
        assert!(h.activate(Box::new(NoWork)).is_err(), "the thread is gone");
        let ticket = h.reset();
        assert!(h.reset_done(ticket), "a reset of a dead loop is done");
    }
}

struct NoWork;

impl EventHandler for NoWork {
    fn watch(&self) -> Vec<(RawFd, u64)> {
        vec![(0, COMMAND_TOKEN)]
    }
    fn start(&mut self, _ctx: &mut LoopContext<'_>) {}
    fn event(&mut self, _token: u64, _ctx: &mut LoopContext<'_>) {}
}

#[test]
fn reserved_tokens_are_refused_and_the_failure_is_reported() {
    let lp = DeviceLoop::spawn("virtio-test").unwrap();
    let h = lp.handle();
    h.activate(Box::new(NoWork)).unwrap();
    h.pause(WAIT).unwrap(); // the activation was processed before the pause
    assert!(h.failed());
    assert!(h.wait_reset(h.reset(), WAIT));
    assert!(!h.failed());
    assert_eq!(h.counters()[1], ("activations", 0));
}
