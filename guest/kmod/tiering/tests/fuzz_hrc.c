// SPDX-License-Identifier: GPL-2.0
/* libFuzzer entry point: clang -fsanitize=fuzzer (see Makefile "fuzz"). */
#include <stdlib.h>
#include "hrc_fuzz_ops.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (hrc_fuzz_run(data, size))
		abort();
	return 0;
}
