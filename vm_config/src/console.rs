//! `--serial` and `--console` (Cloud Hypervisor's syntax): a mode word or
//! `file=`/`socket=`, then for the virtio console upstream's PCI keys.

use std::path::PathBuf;

use option_parser::split_top_level;

use crate::cli::{get, invalid, parser, toggle, ParseError};
use crate::types::{ConsoleConfig, ConsoleOutputMode};

impl ConsoleConfig {
    /// `--serial` syntax.
    pub const SERIAL_SYNTAX: &'static str =
        "off|null|tty|file=<path> (default null; pty and socket= are not supported)";
    /// `--console` syntax.
    pub const CONSOLE_SYNTAX: &'static str = "off|null|tty|file=<path>,iommu=off,\
pci_segment=0 (virtio console, hvc0; default tty; pty is not supported)";

    /// Parses a `--serial` value.
    pub fn parse_serial(input: &str) -> Result<Self, ParseError> {
        parse("--serial", input, &[])
    }

    /// Parses a `--console` value.
    pub fn parse_console(input: &str) -> Result<Self, ParseError> {
        parse(
            "--console",
            input,
            &["iommu", "id", "pci_segment", "pci_device_id"],
        )
    }
}

fn parse(option: &'static str, input: &str, extra: &[&str]) -> Result<ConsoleConfig, ParseError> {
    let items = split_top_level(input.trim(), ',')
        .map_err(|source| ParseError::Option { option, source })?;
    let mut mode = None;
    let mut rest = Vec::new();
    for item in items.iter().filter(|i| !i.is_empty()) {
        let word = match item.trim() {
            "off" => Some(ConsoleOutputMode::Off),
            "null" => Some(ConsoleOutputMode::Null),
            "tty" => Some(ConsoleOutputMode::Tty),
            "pty" => Some(ConsoleOutputMode::Pty),
            _ => None,
        };
        match word {
            Some(_) if mode.is_some() => {
                return Err(invalid(option, format!("'{input}' gives two modes")))
            }
            Some(m) => mode = Some(m),
            None => rest.push(item.as_str()),
        }
    }
    let mut keys = vec!["file", "socket"];
    keys.extend_from_slice(extra);
    let p = parser(option, &keys, &rest.join(","))?;
    let mut config = ConsoleConfig::with_mode(mode.unwrap_or(ConsoleOutputMode::Null));
    for (key, m) in [
        ("file", ConsoleOutputMode::File),
        ("socket", ConsoleOutputMode::Socket),
    ] {
        if let Some(v) = p.get(key) {
            if mode.is_some() || config.mode != ConsoleOutputMode::Null {
                return Err(invalid(option, format!("'{input}' gives two modes")));
            }
            if v.is_empty() {
                return Err(invalid(option, format!("{key}= needs a path")));
            }
            config.mode = m;
            let path = Some(PathBuf::from(v));
            if key == "file" {
                config.file = path;
            } else {
                config.socket = path;
            }
        }
    }
    if mode.is_none() && config.mode == ConsoleOutputMode::Null {
        return Err(invalid(
            option,
            format!("'{input}': expected off, null, tty or file=<path>"),
        ));
    }
    if matches!(
        config.mode,
        ConsoleOutputMode::Pty | ConsoleOutputMode::Socket
    ) {
        return Err(invalid(
            option,
            format!(
                "mode {} is not supported; use off, null, tty or file=<path>",
                if config.mode == ConsoleOutputMode::Pty {
                    "pty".to_owned()
                } else {
                    format!("socket={}", p.get("socket").unwrap_or_default())
                }
            ),
        ));
    }
    config.iommu = toggle(&p, option, "iommu", false)?;
    if config.iommu {
        return Err(invalid(option, "iommu=on is not supported (no vIOMMU)"));
    }
    if let Some(seg) = get::<u16>(&p, option, "pci_segment")?.filter(|&s| s != 0) {
        return Err(invalid(
            option,
            format!("pci_segment={seg} is not supported (no PCI bus; only 0)"),
        ));
    }
    for key in ["id", "pci_device_id"] {
        if let Some(v) = p.get(key) {
            return Err(invalid(option, format!("{key}={v} is not supported")));
        }
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_modes() {
        let mode = |s| ConsoleConfig::parse_serial(s).map(|c| c.mode);
        assert_eq!(mode("tty"), Ok(ConsoleOutputMode::Tty));
        assert_eq!(mode("off"), Ok(ConsoleOutputMode::Off));
        assert_eq!(mode("null"), Ok(ConsoleOutputMode::Null));
        let f = ConsoleConfig::parse_serial("file=/tmp/x").unwrap();
        assert_eq!(
            (f.mode, f.file),
            (ConsoleOutputMode::File, Some(PathBuf::from("/tmp/x")))
        );
        for bad in ["bogus", "file=", "tty,off", "iommu=on", "tty,file=/x"] {
            assert!(ConsoleConfig::parse_serial(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn console_takes_upstream_keys_at_their_defaults() {
        let c = ConsoleConfig::parse_console("tty,iommu=off,pci_segment=0").unwrap();
        assert_eq!(c, ConsoleConfig::default_console());
        let c = ConsoleConfig::parse_console("file=/tmp/hvc0.log").unwrap();
        assert_eq!(c.mode, ConsoleOutputMode::File);
        assert_eq!(
            ConsoleConfig::parse_console("off").unwrap().mode,
            ConsoleOutputMode::Off
        );
    }

    #[test]
    fn unsupported_console_values_name_key_and_value() {
        for (bad, want) in [
            ("pty", "pty"),
            ("tty,pci_segment=1", "pci_segment=1"),
            ("tty,iommu=on", "iommu=on"),
            ("tty,id=con0", "id=con0"),
            ("tty,pci_device_id=3", "pci_device_id=3"),
        ] {
            let e = ConsoleConfig::parse_console(bad).unwrap_err().to_string();
            assert!(
                e.starts_with("--console:") && e.contains(want),
                "{bad}: {e}"
            );
        }
        let e = ConsoleConfig::parse_serial("socket=/tmp/s")
            .unwrap_err()
            .to_string();
        assert!(e.contains("socket=/tmp/s"), "{e}");
    }
}
