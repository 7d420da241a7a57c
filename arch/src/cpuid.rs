//! The CPUID table each vCPU sees: what KVM supports, with the per-vCPU
//! identity (APIC id), the vCPU count and the hypervisor bit filled in.

use kvm_bindings::CpuId;

const LEAF_FEATURES: u32 = 0x1;
const LEAF_CACHE_PARAMS: u32 = 0x4;
const LEAF_EXT_TOPOLOGY: u32 = 0xb;
const LEAF_V2_EXT_TOPOLOGY: u32 = 0x1f;
const LEAF_AMD_SIZE_IDENTIFIERS: u32 = 0x8000_0008;
const LEAF_AMD_EXT_APIC_ID: u32 = 0x8000_001e;

const ECX_HYPERVISOR: u32 = 1 << 31;
const EDX_HTT: u32 = 1 << 28;

/// Adjusts `cpuid` (from `KVM_GET_SUPPORTED_CPUID`) for vCPU `id` of `count`.
pub fn patch_cpuid(cpuid: &mut CpuId, id: u8, count: u8) {
    for entry in cpuid.as_mut_slice().iter_mut() {
        match entry.function {
            LEAF_FEATURES => {
                // EBX: initial APIC id [31:24], logical processor count [23:16],
                // CLFLUSH line size in 8-byte units [15:8].
                entry.ebx = (u32::from(id) << 24) | (u32::from(count) << 16) | (8 << 8);
                entry.ecx |= ECX_HYPERVISOR;
                if count > 1 {
                    entry.edx |= EDX_HTT;
                }
            }
            LEAF_CACHE_PARAMS => {
                // Cores per package - 1 in EAX[31:26]; one thread per core.
                entry.eax &= 0x03ff_ffff;
                entry.eax |= (u32::from(count).saturating_sub(1) & 0x3f) << 26;
                entry.eax &= !(0xfff << 14);
            }
            LEAF_EXT_TOPOLOGY | LEAF_V2_EXT_TOPOLOGY => {
                entry.edx = u32::from(id);
                match entry.index {
                    // SMT level: one thread per core.
                    0 => {
                        entry.eax = 0;
                        entry.ebx = 1;
                        entry.ecx = 1 << 8;
                    }
                    // Core level: all vCPUs in one package.
                    1 => {
                        entry.eax = u32::BITS - u32::from(count).saturating_sub(1).leading_zeros();
                        entry.ebx = u32::from(count);
                        entry.ecx = (2 << 8) | 1;
                    }
                    _ => {
                        entry.eax = 0;
                        entry.ebx = 0;
                        entry.ecx = entry.index;
                    }
                }
            }
            LEAF_AMD_SIZE_IDENTIFIERS => {
                // ECX[7:0]: number of cores - 1.
                entry.ecx = (entry.ecx & !0xff) | u32::from(count).saturating_sub(1);
            }
            LEAF_AMD_EXT_APIC_ID => {
                entry.eax = u32::from(id);
                entry.ebx = u32::from(id) & 0xff;
                entry.ecx = 0;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::kvm_cpuid_entry2;

    #[test]
    fn apic_id_count_and_hypervisor_bit_are_set() {
        let mut cpuid = CpuId::from_entries(&[
            kvm_cpuid_entry2 {
                function: 1,
                ..Default::default()
            },
            kvm_cpuid_entry2 {
                function: 0xb,
                index: 1,
                ..Default::default()
            },
        ])
        .unwrap();
        patch_cpuid(&mut cpuid, 3, 4);
        let e = cpuid.as_slice();
        assert_eq!(e[0].ebx >> 24, 3);
        assert_eq!((e[0].ebx >> 16) & 0xff, 4);
        assert_ne!(e[0].ecx & ECX_HYPERVISOR, 0);
        assert_eq!(e[1].edx, 3);
        assert_eq!(e[1].ebx, 4);
        assert_eq!(e[1].eax, 2);
    }
}
