//! Value types that option strings convert into.

use std::str::FromStr;

use crate::split_top_level;

/// `on`/`off` (also `true`/`false`, and an empty value meaning on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toggle(pub bool);

impl FromStr for Toggle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "" | "on" | "true" => Ok(Toggle(true)),
            "off" | "false" => Ok(Toggle(false)),
            _ => Err("expected on or off".into()),
        }
    }
}

/// A byte count with an optional `K`/`M`/`G`/`T` suffix (powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSized(pub u64);

impl FromStr for ByteSized {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (digits, shift) = match s.char_indices().last() {
            Some((i, 'K' | 'k')) => (&s[..i], 10),
            Some((i, 'M' | 'm')) => (&s[..i], 20),
            Some((i, 'G' | 'g')) => (&s[..i], 30),
            Some((i, 'T' | 't')) => (&s[..i], 40),
            _ => (s, 0),
        };
        let n: u64 = digits
            .parse()
            .map_err(|_| "expected a size such as 512M, 2G or 4096".to_string())?;
        n.checked_mul(1u64 << shift)
            .map(ByteSized)
            .ok_or_else(|| "size does not fit in 64 bits".to_string())
    }
}

/// `[a,b,...]` of [`ByteSized`]; a bare size is a one-element list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ByteSizedList(pub Vec<u64>);

impl FromStr for ByteSizedList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        list_items(s)?
            .iter()
            .map(|item| item.parse::<ByteSized>().map(|b| b.0))
            .collect::<Result<Vec<_>, _>>()
            .map(ByteSizedList)
    }
}

/// `[0-3,7]` or `5`: integers and inclusive ranges, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntegerList(pub Vec<u64>);

/// Largest range an [`IntegerList`] may expand, so `0-99999999999` cannot
/// make the parser allocate gigabytes.
const MAX_RANGE_LEN: u64 = 4096;

impl FromStr for IntegerList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut out = Vec::new();
        for item in list_items(s)? {
            let parse = |v: &str| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("'{v}' is not an integer"))
            };
            match item.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (parse(a)?, parse(b)?);
                    if a > b {
                        return Err(format!("range {a}-{b} is reversed"));
                    }
                    if b - a >= MAX_RANGE_LEN {
                        return Err(format!("range {a}-{b} is too long"));
                    }
                    out.extend(a..=b);
                }
                None => out.push(parse(&item)?),
            }
        }
        Ok(IntegerList(out))
    }
}

/// `[a,b]` or `a`: a list of strings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringList(pub Vec<String>);

impl FromStr for StringList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let items = list_items(s)?;
        if items.iter().any(|i| i.is_empty()) {
            return Err("empty list element".into());
        }
        Ok(StringList(items))
    }
}

/// `[a@b,c@d]`: a list of pairs such as NUMA distances `destination@distance`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TupleList<A, B>(pub Vec<(A, B)>);

impl<A: FromStr, B: FromStr> FromStr for TupleList<A, B> {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        list_items(s)?
            .iter()
            .map(|item| {
                let (a, b) = item
                    .split_once('@')
                    .ok_or_else(|| format!("'{item}' is not of the form a@b"))?;
                let a = a
                    .trim()
                    .parse::<A>()
                    .map_err(|_| format!("bad '{a}' in '{item}'"))?;
                let b = b
                    .trim()
                    .parse::<B>()
                    .map_err(|_| format!("bad '{b}' in '{item}'"))?;
                Ok((a, b))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(TupleList)
    }
}

/// Strips one pair of surrounding brackets (if any) and splits on commas.
fn list_items(s: &str) -> Result<Vec<String>, String> {
    let s = s.trim();
    let inner = match (s.starts_with('['), s.ends_with(']')) {
        (true, true) => &s[1..s.len() - 1],
        (false, false) => s,
        _ => return Err("unbalanced brackets".into()),
    };
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    split_top_level(inner, ',')
        .map(|v| v.into_iter().map(|i| i.trim().to_owned()).collect())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes_accept_suffixes_and_reject_garbage() {
        assert_eq!("4096".parse::<ByteSized>(), Ok(ByteSized(4096)));
        assert_eq!("512M".parse::<ByteSized>(), Ok(ByteSized(512 << 20)));
        assert_eq!("2g".parse::<ByteSized>(), Ok(ByteSized(2 << 30)));
        assert!("".parse::<ByteSized>().is_err());
        assert!("-1G".parse::<ByteSized>().is_err());
        assert!("1.5G".parse::<ByteSized>().is_err());
        assert!("99999999999T".parse::<ByteSized>().is_err());
    }

    #[test]
    fn integer_lists_expand_ranges_and_bound_them() {
        assert_eq!(
            "[0-3,7]".parse::<IntegerList>().unwrap().0,
            vec![0, 1, 2, 3, 7]
        );
        assert_eq!("5".parse::<IntegerList>().unwrap().0, vec![5]);
        assert!("[3-1]".parse::<IntegerList>().is_err());
        assert!("[0-99999999999]".parse::<IntegerList>().is_err());
        assert!("[a]".parse::<IntegerList>().is_err());
    }

    #[test]
    fn tuple_lists_parse_pairs() {
        let t: TupleList<u32, u8> = "[1@20,2@30]".parse().unwrap();
        assert_eq!(t.0, vec![(1, 20), (2, 30)]);
        assert!("[1@300]".parse::<TupleList<u32, u8>>().is_err());
        assert!("[1-20]".parse::<TupleList<u32, u8>>().is_err());
    }

    #[test]
    fn byte_sized_lists_take_one_or_many() {
        assert_eq!(
            "[1G,2G]".parse::<ByteSizedList>().unwrap().0,
            vec![1 << 30, 2 << 30]
        );
        assert_eq!("1G".parse::<ByteSizedList>().unwrap().0, vec![1 << 30]);
        assert!("[1G,x]".parse::<ByteSizedList>().is_err());
    }

    #[test]
    fn toggles() {
        assert_eq!("on".parse::<Toggle>(), Ok(Toggle(true)));
        assert_eq!("off".parse::<Toggle>(), Ok(Toggle(false)));
        assert!("maybe".parse::<Toggle>().is_err());
    }

    #[test]
    fn string_lists_reject_empty_elements() {
        assert_eq!("[a,b]".parse::<StringList>().unwrap().0, vec!["a", "b"]);
        assert!("[a,,b]".parse::<StringList>().is_err());
    }
}
