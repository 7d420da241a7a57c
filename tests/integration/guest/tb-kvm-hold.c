// SPDX-License-Identifier: Apache-2.0
//
// tb-kvm-hold: keep KVM's per-vCPU static keys raised for the lifetime of
// the L1 testbed host, so that starting and stopping L2 guests does not
// live-patch kvm.ko's code.
//
// Why: kvm.ko flips the static keys apic_sw_disabled, apic_hw_disabled and
// kvm_has_noapic_vcpu when vCPUs are created, enable their local APIC, or
// are destroyed. Each flip rewrites code with text_poke_bp() (temporary
// int3). Under QEMU TCG (multi-threaded) that cross-modification can race
// with the other vCPU executing the same code: we observed
//   "Oops: int3 ... RIP: kvm_arch_vcpu_ioctl_run+0x66f [kvm]"
// followed by "Kernel panic - not syncing: Fatal exception in interrupt"
// in L1 while an L2 kernel was booting (the patched site is the
// apic_sw_disabled jump label). With each key's count held above zero by
// idle vCPUs created here at L1 boot (before any guest runs), later guests
// only move the counts between non-zero values: no more patching.
//
// What it holds (all idle, never run):
//   VM A, no in-kernel irqchip, 1 vCPU           -> kvm_has_noapic_vcpu > 0
//   VM B, KVM_CREATE_IRQCHIP, vCPU 0 (APIC still
//         software-disabled, as after reset)    -> apic_sw_disabled > 0
//   VM B, vCPU 1 with IA32_APIC_BASE.EN cleared  -> apic_hw_disabled > 0
//
// Usage: tb-kvm-hold  (prints one line, then sleeps until killed)

#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MSR_IA32_APICBASE 0x1b
#define APIC_DEFAULT_BASE 0xfee00000ULL

static int xioctl(int fd, unsigned long req, unsigned long arg, const char *what)
{
    int r = ioctl(fd, req, arg);
    if (r < 0)
        fprintf(stderr, "tb-kvm-hold: %s: %s\n", what, strerror(errno));
    return r;
}

int main(void)
{
    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0) {
        fprintf(stderr, "tb-kvm-hold: /dev/kvm: %s\n", strerror(errno));
        return 1;
    }
    int ok_noapic = 0, ok_sw = 0, ok_hw = 0;

    int vm_a = xioctl(kvm, KVM_CREATE_VM, 0, "KVM_CREATE_VM (A)");
    if (vm_a >= 0 && xioctl(vm_a, KVM_CREATE_VCPU, 0, "KVM_CREATE_VCPU (A)") >= 0)
        ok_noapic = 1;

    int vm_b = xioctl(kvm, KVM_CREATE_VM, 0, "KVM_CREATE_VM (B)");
    if (vm_b >= 0 && xioctl(vm_b, KVM_CREATE_IRQCHIP, 0, "KVM_CREATE_IRQCHIP") >= 0) {
        if (xioctl(vm_b, KVM_CREATE_VCPU, 0, "KVM_CREATE_VCPU (B0)") >= 0)
            ok_sw = 1;
        int v1 = xioctl(vm_b, KVM_CREATE_VCPU, 1, "KVM_CREATE_VCPU (B1)");
        if (v1 >= 0) {
            struct {
                struct kvm_msrs hdr;
                struct kvm_msr_entry e;
            } m;
            memset(&m, 0, sizeof(m));
            m.hdr.nmsrs = 1;
            m.e.index = MSR_IA32_APICBASE;
            m.e.data = APIC_DEFAULT_BASE; // EN (bit 11) clear: APIC disabled
            if (xioctl(v1, KVM_SET_MSRS, (unsigned long)&m, "KVM_SET_MSRS") == 1)
                ok_hw = 1;
        }
    }
    printf("{\"tool\":\"kvm-hold\",\"noapic_vcpu\":%s,\"apic_sw_disabled\":%s,"
           "\"apic_hw_disabled\":%s}\n",
           ok_noapic ? "true" : "false", ok_sw ? "true" : "false",
           ok_hw ? "true" : "false");
    fflush(stdout);
    for (;;)
        pause();
}
