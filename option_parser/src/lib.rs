//! Parser for the `key=value,key2=value2` option strings that Cloud
//! Hypervisor's command line uses (`--memory-zone id=fast,size=1G`).
//!
//! Values may contain commas inside `[...]` brackets or `"..."` quotes, so
//! lists such as `cpus=[0-3,7]` and `distances=[1@20,2@30]` stay one value.
//! Every key must be registered first: an unknown key is an error, which is
//! how a typo on the command line gets reported instead of ignored.
//!
//! ```
//! use option_parser::{ByteSized, IntegerList, OptionParser};
//!
//! let mut parser = OptionParser::new();
//! parser.add("size").add("cpus");
//! parser.parse("size=2G,cpus=[0-2,5]").unwrap();
//! assert_eq!(parser.convert::<ByteSized>("size").unwrap(), Some(ByteSized(2 << 30)));
//! let cpus: IntegerList = parser.convert("cpus").unwrap().unwrap();
//! assert_eq!(cpus.0, vec![0, 1, 2, 5]);
//! ```

#![deny(missing_docs)]

mod values;

use std::collections::BTreeMap;
use std::str::FromStr;

pub use values::{ByteSized, ByteSizedList, IntegerList, StringList, Toggle, TupleList};

/// Errors from parsing an option string or converting one of its values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OptionParserError {
    /// A key that was not registered with [`OptionParser::add`].
    #[error("unknown key '{0}'")]
    UnknownKey(String),
    /// The same key given twice.
    #[error("key '{0}' given more than once")]
    DuplicateKey(String),
    /// A `key` without `=value` where a value is required.
    #[error("key '{0}' needs a value (key=value)")]
    MissingValue(String),
    /// Unbalanced `[`/`]` or quotes.
    #[error("unbalanced brackets or quotes in '{0}'")]
    Unbalanced(String),
    /// The value could not be converted to the requested type.
    #[error("invalid value '{value}' for '{key}': {reason}")]
    InvalidValue {
        /// The key whose value failed to convert.
        key: String,
        /// The value as given.
        value: String,
        /// Why it failed.
        reason: String,
    },
}

/// Registered keys and, after [`OptionParser::parse`], their values.
#[derive(Debug, Default)]
pub struct OptionParser {
    options: BTreeMap<String, Option<String>>,
}

impl OptionParser {
    /// An empty parser: register keys with [`OptionParser::add`].
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `key` as accepted.
    pub fn add(&mut self, key: &str) -> &mut Self {
        self.options.insert(key.to_owned(), None);
        self
    }

    /// Registers several keys at once.
    pub fn add_all(&mut self, keys: &[&str]) -> &mut Self {
        for key in keys {
            self.add(key);
        }
        self
    }

    /// Parses `input`, storing each value under its key.
    pub fn parse(&mut self, input: &str) -> Result<(), OptionParserError> {
        for item in split_top_level(input, ',')? {
            if item.is_empty() {
                continue;
            }
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k.trim(), v.trim()),
                None => return Err(OptionParserError::MissingValue(item.trim().to_owned())),
            };
            let slot = self
                .options
                .get_mut(key)
                .ok_or_else(|| OptionParserError::UnknownKey(key.to_owned()))?;
            if slot.is_some() {
                return Err(OptionParserError::DuplicateKey(key.to_owned()));
            }
            *slot = Some(unquote(value).to_owned());
        }
        Ok(())
    }

    /// The raw value of `key`, if it was given.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.options.get(key).and_then(|v| v.as_deref())
    }

    /// Whether `key` was given.
    pub fn is_set(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Converts the value of `key` with `T::from_str`; `Ok(None)` if absent.
    pub fn convert<T>(&self, key: &str) -> Result<Option<T>, OptionParserError>
    where
        T: FromStr,
        T::Err: std::fmt::Display,
    {
        match self.get(key) {
            None => Ok(None),
            Some(value) => {
                value
                    .parse::<T>()
                    .map(Some)
                    .map_err(|e| OptionParserError::InvalidValue {
                        key: key.to_owned(),
                        value: value.to_owned(),
                        reason: e.to_string(),
                    })
            }
        }
    }
}

/// Splits `input` on `sep`, except inside `[...]` or `"..."`.
pub fn split_top_level(input: &str, sep: char) -> Result<Vec<String>, OptionParserError> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    let mut quoted = false;
    for c in input.chars() {
        match c {
            '"' => quoted = !quoted,
            '[' if !quoted => depth += 1,
            ']' if !quoted => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| OptionParserError::Unbalanced(input.to_owned()))?
            }
            c if c == sep && depth == 0 && !quoted => {
                parts.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if depth != 0 || quoted {
        return Err(OptionParserError::Unbalanced(input.to_owned()));
    }
    parts.push(current);
    Ok(parts)
}

fn unquote(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser(keys: &[&str]) -> OptionParser {
        let mut p = OptionParser::new();
        p.add_all(keys);
        p
    }

    #[test]
    fn brackets_keep_commas_inside_one_value() {
        let mut p = parser(&["cpus", "distances", "id"]);
        p.parse("id=a,cpus=[0-3,7],distances=[1@20,2@30]").unwrap();
        assert_eq!(p.get("cpus"), Some("[0-3,7]"));
        assert_eq!(p.get("distances"), Some("[1@20,2@30]"));
        assert_eq!(p.get("id"), Some("a"));
    }

    #[test]
    fn unknown_key_is_named_in_the_error() {
        let mut p = parser(&["size"]);
        assert_eq!(
            p.parse("size=1G,szie=2G"),
            Err(OptionParserError::UnknownKey("szie".into()))
        );
    }

    #[test]
    fn duplicate_and_valueless_keys_are_rejected() {
        let mut p = parser(&["size"]);
        assert!(matches!(
            p.parse("size=1G,size=2G"),
            Err(OptionParserError::DuplicateKey(_))
        ));
        let mut p = parser(&["size"]);
        assert!(matches!(
            p.parse("size"),
            Err(OptionParserError::MissingValue(_))
        ));
    }

    #[test]
    fn unbalanced_brackets_are_rejected() {
        let mut p = parser(&["cpus"]);
        assert!(matches!(
            p.parse("cpus=[0-3"),
            Err(OptionParserError::Unbalanced(_))
        ));
        assert!(matches!(
            p.parse("cpus=0]"),
            Err(OptionParserError::Unbalanced(_))
        ));
    }

    #[test]
    fn quotes_protect_commas_and_are_stripped() {
        let mut p = parser(&["file", "id"]);
        p.parse("file=\"/tmp/a,b\",id=x").unwrap();
        assert_eq!(p.get("file"), Some("/tmp/a,b"));
    }

    #[test]
    fn convert_reports_key_and_value() {
        let mut p = parser(&["size"]);
        p.parse("size=12Q").unwrap();
        let err = p.convert::<ByteSized>("size").unwrap_err();
        assert!(err.to_string().contains("size"));
        assert!(err.to_string().contains("12Q"));
        assert_eq!(p.convert::<ByteSized>("missing").unwrap(), None);
    }
}
