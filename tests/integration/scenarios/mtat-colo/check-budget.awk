# Σ FMem held <= budget, judged from the poller's rows (polls.txt:
# "wall_s ms" then per VM "fmem_target fmem_actual facc sacc", -1 when a
# VMM did not answer). Variables: tier, budget (bytes).
#
# One row reads the three VMMs one after another (a ch-remote each,
# ~0.2 s apart under TCG), so a row is not an instant: a slice whose
# donor reached its target between the LC read and the BE reads shows
# the donor before and the receivers after, a sum no instant had (seen:
# 515 of 512 MiB, the LC balloon 3 MiB from a target it reached
# ~0.1 s later). A row's plain sum is therefore only reported (naive).
#
# The check bounds the sum at an instant t between two consecutive rows
# from below, per VM (held = tier - min(target, actual)):
#   * target the same in both rows: the balloon moves towards it, so
#     held only falls (a shrink's actual rises; a growth holds tier -
#     target at once) and the later read is a lower bound for t;
#   * target changed: held >= tier - target always, and between the rows
#     the target was the earlier or the later one (a decision moves a VM
#     one way; decisions are seconds apart), so tier - the larger one.
# A pair whose bound exceeds the budget proves an overrun at t. An
# overrun that lasts (a donor short of its target while the receivers
# have grown) spans pairs with unchanged targets and is seen exactly.
# Assumes the guest moves its balloon only towards the target (no
# deflate_on_oom, no balloon reset), as in this scenario.
#
# Prints: pairs stable_pairs over_budget_pairs max_bound max_naive first
function held(t, a) { return tier - (t < a ? t : a) }
function max(a, b) { return a > b ? a : b }
{
    if ($3 < 0 || $7 < 0 || $11 < 0) { prev = 0; next }
    naive = held($3, $4) + held($7, $8) + held($11, $12)
    if (naive > max_naive) max_naive = naive
    if (prev) {
        bound = 0
        same = 1
        for (c = 3; c <= 11; c += 4) {
            if ($c == t[c]) bound += held($c, $(c + 1))
            else { bound += tier - max($c, t[c]); same = 0 }
        }
        pairs++
        stable += same
        if (bound > max_bound) max_bound = bound
        if (bound > budget) { bad++; if (first == "") first = prow " / " $0 }
    }
    for (c = 3; c <= 11; c += 4) t[c] = $c
    prev = 1
    prow = $0
}
END { printf "%d %d %d %d %d %s\n", pairs, stable, bad, max_bound, max_naive, first }
