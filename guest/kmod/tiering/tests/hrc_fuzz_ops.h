/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Byte-stream driven exerciser of the classifier API with invariant
 * checks after every operation; shared by the libFuzzer target and the
 * deterministic random driver run by "make".
 */
#ifndef _TIERING_HRC_FUZZ_OPS_H
#define _TIERING_HRC_FUZZ_OPS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Interpret @data as a setup plus a sequence of operations.  Returns 0,
 * or -1 after printing the first violated invariant to stderr.
 */
int hrc_fuzz_run(const uint8_t *data, size_t size);

#endif /* _TIERING_HRC_FUZZ_OPS_H */
