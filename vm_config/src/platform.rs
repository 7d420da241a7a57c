//! `--platform` and the `platform` object of `vm.create`: the machine
//! identity the guest reads from SMBIOS (`dmidecode`, `/sys/class/dmi/id`).
//!
//! Field names are upstream Cloud Hypervisor's (v53): `system_serial_number`
//! and `system_uuid`, with their older names `serial_number` and `uuid`
//! accepted on input as upstream does; `vm.info` writes the new names back.
//! Upstream's other platform keys (`num_pci_segments`, `iommu_segments`,
//! `iommu_address_width_bits`, `iommufd`, `iommufd_fd`, `vfio_p2p_dma`) ask
//! for PCI segments, a vIOMMU or VFIO, which this VMM lacks: only their
//! values that ask for nothing are accepted ([`crate::compat`] for JSON,
//! [`PlatformConfig::parse`] for the command line).

use option_parser::StringList;
use serde::{Deserialize, Serialize};

use crate::cli::{get, invalid, parser_with_upstream, ParseError};
use crate::validate::ValidationError;

/// How many bytes the platform strings may take together, each counted
/// with its terminating NUL: what the SMBIOS area below 1 MiB holds beside
/// the fixed structures (`arch::smbios::MAX_STRING_BYTES`, the same bound).
pub const PLATFORM_STRING_BYTES_MAX: usize = 16_000;
/// Most OEM strings (SMBIOS type 11 counts them in one byte).
pub const PLATFORM_OEM_STRINGS_MAX: usize = 255;

/// The guest's SMBIOS identity (`--platform`). Unset fields get upstream's
/// values: manufacturer "Cloud Hypervisor", product name
/// "cloud-hypervisor", no serial number, a nil UUID, no OEM strings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlatformConfig {
    /// SMBIOS type 1 serial number (`/sys/class/dmi/id/product_serial`);
    /// cloud-init's NoCloud datasource reads "ds=nocloud;s=<url>" from it.
    #[serde(
        default,
        alias = "serial_number",
        skip_serializing_if = "Option::is_none"
    )]
    pub system_serial_number: Option<String>,
    /// SMBIOS type 1 UUID (`product_uuid`), as "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
    #[serde(default, alias = "uuid", skip_serializing_if = "Option::is_none")]
    pub system_uuid: Option<String>,
    /// SMBIOS type 11 strings, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oem_strings: Option<Vec<String>>,
    /// SMBIOS type 1 manufacturer (`sys_vendor`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_manufacturer: Option<String>,
    /// SMBIOS type 1 product name (`product_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_product_name: Option<String>,
    /// SMBIOS type 1 version (`product_version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_version: Option<String>,
    /// SMBIOS type 1 family (`product_family`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_family: Option<String>,
    /// SMBIOS type 1 SKU number (`product_sku`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_sku_number: Option<String>,
    /// SMBIOS type 3 asset tag (`chassis_asset_tag`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_asset_tag: Option<String>,
}

/// Upstream's newer and older names of the two renamed keys.
const RENAMED: [(&str, &str); 2] = [
    ("system_serial_number", "serial_number"),
    ("system_uuid", "uuid"),
];

impl PlatformConfig {
    /// `--platform` syntax.
    pub const SYNTAX: &'static str = "system_serial_number=<serial>,system_uuid=<uuid>,\
oem_strings=[<string>,...],system_manufacturer=<name>,system_product_name=<name>,\
system_version=<version>,system_family=<family>,system_sku_number=<sku>,\
chassis_asset_tag=<tag> (the guest's SMBIOS identity; serial_number= and uuid= are \
upstream's older names; quote a value that has commas: \"a,b\"; upstream's \
num_pci_segments=1, iommu_address_width=<bits>, iommufd=off and vfio_p2p_dma=on|off \
are accepted and ask for nothing)";

    /// Parses a `--platform` value.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        const O: &str = "--platform";
        let p = parser_with_upstream(
            O,
            &[
                "system_serial_number",
                "serial_number",
                "system_uuid",
                "uuid",
                "oem_strings",
                "system_manufacturer",
                "system_product_name",
                "system_version",
                "system_family",
                "system_sku_number",
                "chassis_asset_tag",
                // Only matters with a vIOMMU: any width asks for nothing.
                "iommu_address_width",
            ],
            &[
                ("num_pci_segments", &["1"]),
                ("iommu_segments", &[]),
                ("iommufd", &["off", "false"]),
                ("iommufd_fd", &[]),
                // Only matters with VFIO devices.
                ("vfio_p2p_dma", &["on", "off", "true", "false"]),
            ],
            input,
        )?;
        get::<u8>(&p, O, "iommu_address_width")?;
        let renamed = |new: &str, old: &str| match (p.get(new), p.get(old)) {
            (Some(_), Some(_)) => Err(invalid(
                O,
                format!("give {new}= or its older name {old}=, not both"),
            )),
            (v, w) => Ok(v.or(w).map(str::to_owned)),
        };
        let text = |key: &str| p.get(key).map(str::to_owned);
        let oem_strings = get::<StringList>(&p, O, "oem_strings")?.map(|l| {
            l.0.into_iter()
                .map(|s| unquote(&s).to_owned())
                .collect::<Vec<_>>()
        });
        Ok(Self {
            system_serial_number: renamed(RENAMED[0].0, RENAMED[0].1)?,
            system_uuid: renamed(RENAMED[1].0, RENAMED[1].1)?,
            oem_strings,
            system_manufacturer: text("system_manufacturer"),
            system_product_name: text("system_product_name"),
            system_version: text("system_version"),
            system_family: text("system_family"),
            system_sku_number: text("system_sku_number"),
            chassis_asset_tag: text("chassis_asset_tag"),
        })
    }

    /// Every single string field with its name (not the OEM strings).
    pub fn strings(&self) -> [(&'static str, Option<&str>); 8] {
        [
            ("system_serial_number", self.system_serial_number.as_deref()),
            ("system_uuid", self.system_uuid.as_deref()),
            ("system_manufacturer", self.system_manufacturer.as_deref()),
            ("system_product_name", self.system_product_name.as_deref()),
            ("system_version", self.system_version.as_deref()),
            ("system_family", self.system_family.as_deref()),
            ("system_sku_number", self.system_sku_number.as_deref()),
            ("chassis_asset_tag", self.chassis_asset_tag.as_deref()),
        ]
    }

    /// The UUID's 16 bytes in RFC 4122 order; `Ok(None)` when unset.
    pub fn uuid_bytes(&self) -> Result<Option<[u8; 16]>, ValidationError> {
        self.system_uuid
            .as_deref()
            .map(|u| {
                parse_uuid(u).map_err(|e| {
                    ValidationError::Platform(format!("system_uuid '{u}' is not a UUID: {e}"))
                })
            })
            .transpose()
    }

    /// Checks what SMBIOS can hold: a UUID that parses, no NUL byte in any
    /// string, no empty OEM string, at most [`PLATFORM_OEM_STRINGS_MAX`] OEM
    /// strings and [`PLATFORM_STRING_BYTES_MAX`] bytes of strings.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let err = |m: String| Err(ValidationError::Platform(m));
        self.uuid_bytes()?;
        let oem = self.oem_strings.as_deref().unwrap_or_default();
        for (field, s) in self.strings() {
            if s.is_some_and(|s| s.contains('\0')) {
                return err(format!("{field} contains a NUL byte"));
            }
        }
        if oem.len() > PLATFORM_OEM_STRINGS_MAX {
            return err(format!(
                "{} oem_strings given; at most {PLATFORM_OEM_STRINGS_MAX} fit SMBIOS",
                oem.len()
            ));
        }
        for (i, s) in oem.iter().enumerate() {
            if s.is_empty() {
                return err(format!(
                    "oem_strings[{i}] is empty; an SMBIOS string cannot be"
                ));
            }
            if s.contains('\0') {
                return err(format!("oem_strings[{i}] contains a NUL byte"));
            }
        }
        // The UUID is stored as 16 bytes, not as a string.
        let bytes: usize = self
            .strings()
            .iter()
            .filter(|(f, _)| *f != "system_uuid")
            .filter_map(|(_, s)| *s)
            .chain(oem.iter().map(String::as_str))
            .filter(|s| !s.is_empty())
            .map(|s| s.len() + 1)
            .sum();
        if bytes > PLATFORM_STRING_BYTES_MAX {
            return err(format!(
                "the platform strings take {bytes} bytes (each plus a NUL); \
                 the SMBIOS area holds at most {PLATFORM_STRING_BYTES_MAX}"
            ));
        }
        Ok(())
    }
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(s)
}

/// Parses a UUID in the forms upstream accepts: hyphenated
/// (`4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6`), 32 hex digits, either in
/// braces, or after `urn:uuid:`; any case. Returns its bytes in RFC 4122
/// (written) order.
pub fn parse_uuid(s: &str) -> Result<[u8; 16], String> {
    let inner = if let Some(b) = s.strip_prefix('{') {
        b.strip_suffix('}')
            .ok_or_else(|| "a '{' without its '}'".to_string())?
    } else if s
        .get(..9)
        .is_some_and(|p| p.eq_ignore_ascii_case("urn:uuid:"))
    {
        &s[9..]
    } else {
        s
    };
    let hex: String = if inner.len() == 36 {
        let groups: Vec<&str> = inner.split('-').collect();
        let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        if lens != [8, 4, 4, 4, 12] {
            return Err("expected groups of 8-4-4-4-12 hex digits".into());
        }
        groups.concat()
    } else if inner.len() == 32 {
        inner.to_owned()
    } else {
        return Err(format!(
            "expected 32 hex digits, optionally as 8-4-4-4-12 (got {} characters)",
            inner.len()
        ));
    };
    let mut out = [0u8; 16];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |c: u8| {
            (c as char)
                .to_digit(16)
                .ok_or_else(|| format!("'{}' is not a hex digit", c as char))
        };
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: &str = "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6";
    const U_BYTES: [u8; 16] = [
        0x4e, 0xc6, 0xf2, 0xa8, 0x1b, 0x2c, 0x4d, 0x3e, 0x8f, 0x90, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5,
        0xf6,
    ];

    #[test]
    fn uuids_parse_in_every_form_upstream_takes() {
        for s in [
            U,
            "4EC6F2A8-1B2C-4D3E-8F90-A1B2C3D4E5F6",
            "4ec6f2a81b2c4d3e8f90a1b2c3d4e5f6",
            "{4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6}",
            "urn:uuid:4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6",
        ] {
            assert_eq!(parse_uuid(s), Ok(U_BYTES), "{s}");
        }
        for bad in [
            "",
            "nope",
            "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f",
            "4ec6f2a8-1b2c-4d3e-8f90a-1b2c3d4e5f6",
            "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5fg",
            "{4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6",
            "4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6-",
            "é4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5",
        ] {
            assert!(parse_uuid(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cli_takes_every_key_and_the_older_names() {
        let p = PlatformConfig::parse(
            "system_serial_number=ds=nocloud;s=http://10.0.0.1:8000/,system_uuid=4ec6f2a8-1b2c-4d3e-8f90-a1b2c3d4e5f6,\
             oem_strings=[a,\"b,c\",io.systemd.credential:x=y],system_manufacturer=M,system_product_name=P,\
             system_version=V,system_family=F,system_sku_number=S,chassis_asset_tag=T",
        )
        .unwrap();
        assert_eq!(
            p.system_serial_number.as_deref(),
            Some("ds=nocloud;s=http://10.0.0.1:8000/")
        );
        assert_eq!(p.uuid_bytes().unwrap(), Some(U_BYTES));
        assert_eq!(
            p.oem_strings.as_deref().unwrap(),
            ["a", "b,c", "io.systemd.credential:x=y"]
        );
        assert_eq!(
            [
                &p.system_manufacturer,
                &p.system_product_name,
                &p.system_version,
                &p.system_family,
                &p.system_sku_number,
                &p.chassis_asset_tag
            ]
            .map(|s| s.as_deref().unwrap()),
            ["M", "P", "V", "F", "S", "T"]
        );
        p.validate().unwrap();

        let old = PlatformConfig::parse(&format!("serial_number=\"a,b\",uuid={U}")).unwrap();
        assert_eq!(old.system_serial_number.as_deref(), Some("a,b"));
        assert_eq!(old.system_uuid.as_deref(), Some(U));
        let e = PlatformConfig::parse("serial_number=a,system_serial_number=b").unwrap_err();
        assert!(e.to_string().contains("not both"), "{e}");
    }

    #[test]
    fn cli_accepts_upstream_keys_that_ask_for_nothing_and_refuses_the_rest() {
        let p = PlatformConfig::parse(
            "num_pci_segments=1,iommu_address_width=48,iommufd=off,vfio_p2p_dma=on",
        )
        .unwrap();
        assert_eq!(p, PlatformConfig::default());
        for (bad, want) in [
            ("num_pci_segments=2", "num_pci_segments=2 is not supported"),
            ("iommufd=on", "iommufd=on is not supported"),
            ("iommu_segments=[0]", "iommu_segments=[0] is not supported"),
            ("iommufd_fd=3", "iommufd_fd=3 is not supported"),
            ("iommu_address_width=x", "iommu_address_width"),
            ("tdx=on", "unknown key 'tdx'"),
        ] {
            let e = PlatformConfig::parse(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--platform:") && e.contains(want),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn validation_names_the_field_and_the_limit() {
        let check = |p: PlatformConfig| p.validate().map_err(|e| e.to_string());
        let e = check(PlatformConfig {
            system_uuid: Some("nope".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.starts_with("--platform: system_uuid 'nope'"), "{e}");
        let e = check(PlatformConfig {
            system_family: Some("a\0b".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.contains("system_family contains a NUL"), "{e}");
        let e = check(PlatformConfig {
            oem_strings: Some(vec!["a".into(), String::new()]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.contains("oem_strings[1] is empty"), "{e}");
        let e = check(PlatformConfig {
            oem_strings: Some(vec!["x\0".into()]),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.contains("oem_strings[0] contains a NUL"), "{e}");
        let many = |n: usize| PlatformConfig {
            oem_strings: Some((0..n).map(|i| i.to_string()).collect()),
            ..Default::default()
        };
        check(many(PLATFORM_OEM_STRINGS_MAX)).unwrap();
        let e = check(many(PLATFORM_OEM_STRINGS_MAX + 1)).unwrap_err();
        assert!(e.contains("256 oem_strings given; at most 255"), "{e}");

        // Exactly the budget, then one byte more. The UUID does not count.
        let long = |n: usize| PlatformConfig {
            system_serial_number: Some("s".repeat(9)),
            system_uuid: Some(U.into()),
            oem_strings: Some(vec!["o".repeat(n)]),
            ..Default::default()
        };
        check(long(PLATFORM_STRING_BYTES_MAX - 10 - 1)).unwrap();
        let e = check(long(PLATFORM_STRING_BYTES_MAX - 10)).unwrap_err();
        assert!(
            e.contains("16001 bytes") && e.contains("at most 16000"),
            "{e}"
        );
    }

    #[test]
    fn json_takes_the_older_names_and_writes_the_new_ones() {
        let p: PlatformConfig = serde_json::from_str(&format!(
            r#"{{"serial_number":"s","uuid":"{U}","oem_strings":["a"]}}"#
        ))
        .unwrap();
        assert_eq!(p.system_serial_number.as_deref(), Some("s"));
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"system_serial_number":"s","system_uuid":U,"oem_strings":["a"]})
        );
        let both = r#"{"serial_number":"a","system_serial_number":"b"}"#;
        let e = serde_json::from_str::<PlatformConfig>(both).unwrap_err();
        assert!(e.to_string().contains("duplicate field"), "{e}");
        assert_eq!(
            serde_json::to_value(PlatformConfig::default()).unwrap(),
            serde_json::json!({})
        );
    }
}
