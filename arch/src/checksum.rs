//! Byte-sum checksums: a structure checksums correctly when all its bytes,
//! the checksum byte included, sum to zero modulo 256. The MP table and the
//! SMBIOS entry point use them; the ACPI tables are checksummed by the
//! `acpi_tables` crate itself.

/// Sum of all bytes modulo 256; 0 for a correctly checksummed structure.
pub fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, b| s.wrapping_add(*b))
}

/// Byte that makes `bytes` (plus it) sum to zero modulo 256.
pub fn checksum_byte(bytes: &[u8]) -> u8 {
    sum(bytes).wrapping_neg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_wraps_modulo_256() {
        assert_eq!(sum(&[]), 0);
        assert_eq!(sum(&[1, 2, 3]), 6);
        assert_eq!(sum(&[0xff, 0x02]), 0x01);
        assert_eq!(sum(&[0x80; 4]), 0);
    }

    #[test]
    fn checksum_byte_makes_the_sum_zero() {
        assert_eq!(checksum_byte(&[]), 0);
        assert_eq!(checksum_byte(&[1, 2, 3]), 0xfa);
        for bytes in [&b"_MP_"[..], b"_SM3_", &[0u8, 0xff, 0x7f]] {
            let mut v = bytes.to_vec();
            v.push(checksum_byte(bytes));
            assert_eq!(sum(&v), 0, "{bytes:?}");
        }
    }
}
