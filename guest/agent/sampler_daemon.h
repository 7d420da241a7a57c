/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The agent's sampling thread: for every running target of the module it
 * claims the target (targets/<i>/source = user), samples its threads with
 * sampler.c and writes the accepted addresses to targets/<i>/samples_in;
 * on stop it hands every target back to the module's own source
 * (source = kernel).  One thread, so that relocation rounds (move_pages
 * of thousands of pages) never delay the reading of the rings.
 */
#ifndef _AGENT_SAMPLER_DAEMON_H
#define _AGENT_SAMPLER_DAEMON_H

#include "sampler.h"

/*
 * sampler_choose() - the --sampler argument: auto, pebs, pagefault, off.
 * auto is pebs where this CPU has it, else off (the module's own source:
 * accessed bits are a better hotness signal than page faults).  PEBS
 * takes the module's periods and load-latency threshold.
 *
 * Return: 0 with @o filled (kind SAMPLER_OFF included, @msg says why),
 * -EINVAL for an unknown name, or -errno with @msg when the requested
 * kind cannot run here.
 */
int sampler_choose(const char *name, struct sampler_opts *o, char *msg,
		   size_t len);

/* @sysfs: the module's directory (/sys/kernel/tiering). 0 or -errno. */
int sampler_daemon_start(const struct sampler_opts *o, const char *sysfs,
			 int verbose);
/* Stop, release the targets, print one {"sampler":"done",...} line. */
void sampler_daemon_stop(void);

#endif /* _AGENT_SAMPLER_DAEMON_H */
