//! The `mtat-colo` scenario's budget check (check-budget.awk) on poll rows:
//! rows recorded in the testbed, where one row reads the three VMMs one
//! after another, and rows of a real overrun.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;
const TIER: u64 = 256 * MIB;
const BUDGET: u64 = 512 * MIB;

/// (pairs, stable pairs, pairs over budget, max bound, max row sum).
fn check(rows: &str) -> (u64, u64, u64, u64, u64) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/integration/scenarios/mtat-colo/check-budget.awk");
    let mut child = Command::new("awk")
        .arg("-v")
        .arg(format!("tier={TIER}"))
        .arg("-v")
        .arg(format!("budget={BUDGET}"))
        .arg("-f")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("awk runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rows.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let f: Vec<u64> = text
        .split_whitespace()
        .take(5)
        .map(|x| x.parse().unwrap())
        .collect();
    (f[0], f[1], f[2], f[3], f[4])
}

/// Run 20261126-143605-8178, polls 48-50: the decision that shrank the LC
/// VM from 6 to 4 units and grew both BE VMs from 5 to 6. The middle row
/// read the LC VMM while its balloon was 3 MiB from its target (125 of
/// 128 MiB, moving at ~24 MiB/s) and the BE VMMs a few hundred ms later,
/// after the daemon had seen the LC balloon reach its target and grown
/// them: its own sum (515 MiB) was at no instant; the old check, which
/// judged each row's sum, failed the run on it.
const TESTBED_ROWS: &str = "\
1795704177 122210 134217728 80740352 188 0 100663296 100663296 98453 494 100663296 100663296 80964 0
1795704179 124160 134217728 131072000 188 0 67108864 99614720 98453 494 67108864 85983232 80964 0
1795704181 125850 201326592 163577856 188 0 67108864 67108864 98453 494 67108864 67108864 80964 0
";

#[test]
fn a_row_read_across_a_slice_is_not_an_overrun() {
    let (pairs, stable, bad, max_bound, max_row) = check(TESTBED_ROWS);
    assert_eq!(max_row, 515 * MIB, "the row sum the old check judged");
    assert_eq!((pairs, stable, bad), (2, 0, 0));
    assert!(max_bound <= BUDGET, "{max_bound}");
}

#[test]
fn a_donor_short_of_its_target_with_grown_receivers_is_an_overrun() {
    // The LC balloon stops 3 MiB short of 128 MiB and stays there while
    // both BE VMs have grown to 192 MiB: 515 MiB held, at every instant.
    let rows = "\
10 1000 134217728 131072000 0 0 100663296 100663296 0 0 67108864 67108864 0 0
12 3000 134217728 131072000 0 0 67108864 99614720 0 0 67108864 67108864 0 0
14 5000 134217728 131072000 0 0 67108864 67108864 0 0 67108864 67108864 0 0
";
    let (pairs, stable, bad, max_bound, _) = check(rows);
    assert_eq!((pairs, stable), (2, 1));
    // The pair across be1's growth is bounded with be1's old target; the
    // next one, at rest, sees the whole overrun.
    assert_eq!(bad, 1);
    assert_eq!(max_bound, 515 * MIB);
}

#[test]
fn a_shrink_in_progress_counts_what_the_guest_still_holds() {
    // be1 shrinks from 192 to 160 MiB slowly; the LC VM already grew into
    // the FMem be1 has not given yet: over budget while be1's balloon
    // moves (target unchanged, actual short of it).
    let rows = "\
10 1000 67108864 67108864 0 0 100663296 70254592 0 0 67108864 67108864 0 0
12 3000 67108864 67108864 0 0 100663296 76546048 0 0 67108864 67108864 0 0
";
    let (pairs, _, bad, max_bound, _) = check(rows);
    assert_eq!((pairs, bad), (1, 1));
    assert_eq!(max_bound, 192 * MIB + (256 - 73) * MIB + 192 * MIB);
}

#[test]
fn rows_with_a_missing_vmm_break_the_chain() {
    let rows = "\
10 1000 134217728 134217728 0 0 100663296 100663296 0 0 67108864 67108864 0 0
12 3000 -1 -1 -1 -1 100663296 100663296 0 0 67108864 67108864 0 0
14 5000 134217728 134217728 0 0 100663296 100663296 0 0 67108864 67108864 0 0
16 7000 134217728 134217728 0 0 100663296 100663296 0 0 67108864 67108864 0 0
";
    let (pairs, stable, bad, max_bound, _) = check(rows);
    assert_eq!((pairs, stable, bad), (1, 1, 0));
    assert_eq!(max_bound, 128 * MIB + 160 * MIB + 192 * MIB);
}
