/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Kernel/user-space compatibility for the range classifier core.
 *
 * The core only needs fixed-width integer types, bool, errno values and
 * the page shift.  In the kernel these come from the usual headers; in
 * user space (unit tests, fuzzing) they are mapped to libc equivalents.
 * The core itself never allocates memory, never sleeps and never uses
 * floating point, so nothing else has to be mapped.
 */
#ifndef _TIERING_HRC_COMPAT_H
#define _TIERING_HRC_COMPAT_H

#ifdef __KERNEL__

#include <linux/types.h>
#include <linux/errno.h>
#include <linux/compiler.h>
#include <linux/limits.h>
#include <asm/page.h>

#define HRC_PAGE_SHIFT		PAGE_SHIFT

#else /* !__KERNEL__ */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int32_t s32;
typedef int64_t s64;

#ifndef U32_MAX
#define U32_MAX			((u32)~0U)
#endif
#ifndef U64_MAX
#define U64_MAX			((u64)~0ULL)
#endif

#ifndef likely
#define likely(x)		__builtin_expect(!!(x), 1)
#define unlikely(x)		__builtin_expect(!!(x), 0)
#endif

#define HRC_PAGE_SHIFT		12

#endif /* __KERNEL__ */

#endif /* _TIERING_HRC_COMPAT_H */
