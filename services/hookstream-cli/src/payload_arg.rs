//! JSON given on the command line as curl takes it: the text itself, `@path` (a file's
//! contents) or `@-` (standard input). Nothing is stripped or reformatted (unlike curl's
//! `-d @file`, which drops line breaks, this is `--data-binary`): the bytes read are the bytes
//! used, which for a payload are the bytes delivered and signed.

use std::io::Read;

use anyhow::{bail, Context as _};
use serde::de::IgnoredAny;

/// The text `value` stands for: the contents of the file after `@`, standard input for `@-`,
/// else `value` itself. `flag` names the flag in errors.
pub(crate) fn read(flag: &str, value: &str) -> anyhow::Result<String> {
    read_from(flag, value, &mut std::io::stdin().lock())
}

fn read_from(flag: &str, value: &str, stdin: &mut dyn Read) -> anyhow::Result<String> {
    let Some(source) = value.strip_prefix('@') else {
        return Ok(value.to_string());
    };
    let mut bytes = Vec::new();
    if source == "-" {
        stdin
            .read_to_end(&mut bytes)
            .with_context(|| format!("{flag} @-: reading standard input"))?;
    } else if source.is_empty() {
        bail!("{flag} @: name a file after @ (or @- for standard input)");
    } else {
        bytes = std::fs::read(source).with_context(|| format!("{flag} @{source}: reading the file"))?;
    }
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{flag} {value}: not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// Checks that `text` is one JSON object (surrounding whitespace allowed), without building
/// it: the text is kept as it is.
pub(crate) fn check_object(flag: &str, text: &str) -> anyhow::Result<()> {
    if let Err(e) = serde_json::from_str::<IgnoredAny>(text) {
        bail!("{flag} is not valid JSON: {e}");
    }
    // Valid JSON whose first significant character is `{` is an object.
    if !text.trim_start_matches([' ', '\t', '\n', '\r']).starts_with('{') {
        bail!("{flag} must be a JSON object ({{…}})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_file_and_stdin() {
        let mut none: &[u8] = b"";
        assert_eq!(
            read_from("--data", r#"{"a":1}"#, &mut none).unwrap(),
            r#"{"a":1}"#
        );
        let mut input: &[u8] = b"{\"b\":  2}\n";
        assert_eq!(read_from("--data", "@-", &mut input).unwrap(), "{\"b\":  2}\n");
        let dir = std::env::temp_dir().join(format!("hookstream-cli-arg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.json");
        std::fs::write(&file, "{\r\n \"c\" : 3.50 }").unwrap();
        let arg = format!("@{}", file.display());
        assert_eq!(
            read_from("--data", &arg, &mut none).unwrap(),
            "{\r\n \"c\" : 3.50 }"
        );
        let missing = format!("@{}", dir.join("missing.json").display());
        let e = read_from("--data", &missing, &mut none).unwrap_err();
        assert!(format!("{e:#}").contains("reading the file"), "{e:#}");
        let mut latin1: &[u8] = b"{\"x\":\"\xe9\"}";
        let e = read_from("--data", "@-", &mut latin1).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        assert!(read_from("--data", "@", &mut none).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn objects_only() {
        check_object("--data", " {\"a\": [1, 2]}\n").unwrap();
        let e = check_object("--data", "[1]").unwrap_err().to_string();
        assert!(e.contains("must be a JSON object"), "{e}");
        let e = check_object("--data", "{\"a\":").unwrap_err().to_string();
        assert!(e.contains("not valid JSON") && e.contains("line 1"), "{e}");
        assert!(check_object("--data", "{} {}").is_err(), "one value only");
        assert!(check_object("--data", "").is_err());
    }
}
