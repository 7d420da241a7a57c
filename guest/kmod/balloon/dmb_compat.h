/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Differences between the stock kernels the driver builds against
 * (Debian 12: 6.1 LTS and 6.12), in one place.
 */
#ifndef _DEMETER_BALLOON_COMPAT_H
#define _DEMETER_BALLOON_COMPAT_H

#include <linux/version.h>
#include <linux/virtio_config.h>
#include <uapi/linux/virtio_balloon.h>

/*
 * Statistics tags 10..15 (virtio spec 1.3) are in the uapi header since
 * 6.10; the values are fixed by the spec.
 */
#ifndef VIRTIO_BALLOON_S_OOM_KILL
#define VIRTIO_BALLOON_S_OOM_KILL	10
#define VIRTIO_BALLOON_S_ALLOC_STALL	11
#define VIRTIO_BALLOON_S_ASYNC_SCAN	12
#define VIRTIO_BALLOON_S_DIRECT_SCAN	13
#define VIRTIO_BALLOON_S_ASYNC_RECLAIM	14
#define VIRTIO_BALLOON_S_DIRECT_RECLAIM	15
#endif

/* One virtqueue to set up: its name and interrupt callback. */
struct dmb_vq_info {
	const char *name;
	vq_callback_t *callback;
};

/*
 * virtio_find_vqs() takes a struct virtqueue_info array since 6.11 and
 * parallel callback / name arrays before.
 */
static inline int dmb_find_vqs(struct virtio_device *vdev, unsigned int n,
			       struct virtqueue *vqs[],
			       const struct dmb_vq_info *info)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	struct virtqueue_info vi[8] = {};
#else
	vq_callback_t *cbs[8] = {};
	const char *names[8] = {};
#endif
	unsigned int i;

	if (n > 8)
		return -EINVAL;
	for (i = 0; i < n; i++) {
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
		vi[i].name = info[i].name;
		vi[i].callback = info[i].callback;
#else
		names[i] = info[i].name;
		cbs[i] = info[i].callback;
#endif
	}
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 11, 0)
	return virtio_find_vqs(vdev, n, vqs, vi, NULL);
#else
	return virtio_find_vqs(vdev, n, vqs, cbs, names, NULL);
#endif
}

#endif /* _DEMETER_BALLOON_COMPAT_H */
