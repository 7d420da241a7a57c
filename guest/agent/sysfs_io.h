/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Small whole-file reads and writes of sysfs attributes and a monotonic
 * clock, shared by the agent's relocation loop and its sampler thread.
 */
#ifndef _AGENT_SYSFS_IO_H
#define _AGENT_SYSFS_IO_H

#include <stddef.h>
#include <stdint.h>

/* Read up to @len - 1 bytes, NUL-terminated; bytes read or -errno. */
int sysfs_read(const char *path, char *buf, size_t len);
/* Write @s in one write(2); 0 or -errno (the attribute's own error). */
int sysfs_write(const char *path, const char *s);
/* The file's number, or @dflt if it cannot be read. */
long sysfs_read_long(const char *path, long dflt);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t mono_ms(void);

#endif /* _AGENT_SYSFS_IO_H */
