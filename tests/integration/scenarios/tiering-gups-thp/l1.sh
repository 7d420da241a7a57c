# shellcheck shell=sh
# tiering-gups-thp: the tiering-gups scenario with transparent huge pages
# in the L2 (THP "always", the GUPS region MADV_HUGEPAGE: Debian 6.12's
# default), and no balloon resize during the "ours" phase.
#
# What it checks: every check of tiering-gups (its l1.sh and, in the L2,
# its l2.sh: tb.run=tiering-gups, tb.tier_thp=1), i.e. that tiering.ko's
# accessed-bit source finds GUPS' 64 MiB hot set when it is mapped by
# 2 MiB huge entries (one accessed bit for 512 base pages; judged by
# their time-to-young, guest/kmod/tiering/README.md "Huge entries"),
# moves it to FMem (ours-hot-set-reached-60pct-in-fmem), and does so
# precisely: ours-promotions-within-2x-hot-set (at most twice the hot
# set's pages promoted in the whole phase).
# Why a scenario of its own: with THP the hot set is seen through one bit
# per huge entry, a different signal from base pages; the default
# tiering-gups run (4 KiB pages) never exercises it. The balloon step is
# off because it forces demotions and promotions of its own
# (the capacity check), which the promotion count must not include.
#
# Not in --all yet (not-in-all says why); run it by name.
# Results are filed under tiering-gups-thp (TB_SCENARIO, set by the L1
# init from this directory's name); the L2 runs tiering-gups' l2.sh and
# reports as tiering-gups (tiering-gups/l1.sh reads its markers by that
# name).
# GUPS -r 10, as tiering-gups and scripts/bench.sh tiering run it (hot
# bytes 10 times as likely to be updated as cold ones): the cold part
# still gets 47 % of the updates, so each cold 2 MiB entry is touched
# every ~0.44 ms natively, not cold by any accessed-bit measure (DAMON's
# 5 ms samples would find every entry accessed), against ~44 us for a hot
# one; told apart by the entries' censored rates (README "Huge
# entries"). `--l1-append TB_TIER_RATIO=100` runs GUPS -r 100 (a cold
# entry every ~2.7 ms); README "The censored rate" gives both's results.
TB_TIER_RATIO=${TB_TIER_RATIO:-10}
TB_TIER_THP=1
TB_TIER_BALLOON=0
# shellcheck source=../tiering-gups/l1.sh
. "$TB_SCENARIO_DIR/../tiering-gups/l1.sh"
