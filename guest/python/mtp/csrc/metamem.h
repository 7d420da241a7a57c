/* SPDX-License-Identifier: Apache-2.0 */
/*
 * MTP's own large arrays (the object table, a round's heat array) in
 * anonymous mappings that prefer the slow tier: they are read only by MTP's
 * passes, and every FMem page they took would be one the program's hot
 * pages cannot have (under first touch they landed in the FMem left free).
 */
#ifndef MTP_METAMEM_H
#define MTP_METAMEM_H

#include <stddef.h>

/*
 * Node new metadata mappings prefer (MPOL_PREFERRED, so they still fall
 * back elsewhere when it is full); negative: the default policy.
 */
void mtp_meta_set_node(int node);
int mtp_meta_node(void);

/* Zeroed memory of @bytes (> 0), or NULL. */
void *mtp_meta_alloc(size_t bytes);

/* Frees what mtp_meta_alloc(@bytes) returned; NULL is ignored. */
void mtp_meta_free(void *p, size_t bytes);

/*
 * mbind(2) failures since the last mtp_meta_reset_failures() (the memory is
 * then placed by the default policy).
 */
unsigned long mtp_meta_bind_failures(void);
void mtp_meta_reset_failures(void);

#endif
