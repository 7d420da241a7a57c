/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What demeter_balloon.ko exports to other guest modules: tiering.ko
 * sizes FMem by it, looking it up with symbol_get() so that neither
 * module needs the other loaded.  The modules are built apart (the
 * testbed copies each directory alone), so tiering/tier.h repeats this
 * prototype: change both together.
 */
#ifndef _DEMETER_BALLOON_EXPORT_H
#define _DEMETER_BALLOON_EXPORT_H

unsigned long dmb_node_ballooned_managed_pages(int nid);

#endif /* _DEMETER_BALLOON_EXPORT_H */
