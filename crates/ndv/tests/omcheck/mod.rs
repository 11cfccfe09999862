//! A strict checker of the OpenMetrics 1.0 text format, written from the
//! specification's ABNF and its text rules, for the tests of what ndverbs
//! exposes: UTF-8 without carriage returns; one `# EOF` line, last; no
//! other `#` line than `# TYPE`/`# HELP`/`# UNIT`, each at most once per
//! family and before its samples; metric and label names per the ABNF
//! (no leading underscore on label names); a unit the suffix of its
//! family's name; label values and help texts escaped (`\\`, `\"`, `\n`
//! only); numbers per the ABNF; a counter's samples `_total` (non-negative,
//! not NaN) or `_created`, a gauge's and unknown's the family name, an
//! info's `_info` with the value 1; families not repeated, not interleaved
//! and not clashing with another family's sample names; metrics (label
//! sets) not interleaved and not repeated; unique label names in a set.
//!
//! It supports the types ndverbs could emit (counter, gauge, info,
//! unknown) and rejects the others rather than half-check them.

use std::collections::{HashMap, HashSet};

/// One sample: name, labels in order, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

/// One family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: Option<String>,
    pub unit: Option<String>,
    pub samples: Vec<Sample>,
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_' || f == ':')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    // Leading underscores are reserved.
    matches!(c.next(), Some(f) if f.is_ascii_alphabetic())
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// Unescapes an escaped-string (`"` not allowed unescaped); returns the
/// string and what is left after it (stops at an unescaped `"` or the end).
fn unescape(s: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut it = s.char_indices();
    while let Some((i, c)) = it.next() {
        match c {
            '"' => return Ok((out, &s[i..])),
            '\n' => return Err("newline in an escaped string".into()),
            '\\' => match it.next() {
                Some((_, 'n')) => out.push('\n'),
                Some((_, '"')) => out.push('"'),
                Some((_, '\\')) => out.push('\\'),
                other => return Err(format!("bad escape \\{other:?}")),
            },
            c => out.push(c),
        }
    }
    Ok((out, ""))
}

fn number(s: &str) -> Result<f64, String> {
    let l = s.to_ascii_lowercase();
    let body = l.strip_prefix(['+', '-']).unwrap_or(&l);
    let special = matches!(body, "inf" | "infinity") || l == "nan";
    if !special {
        // realnumber: [SIGN] digits [. digits] [e [SIGN] digits], or .digits
        let (mant, exp) = match body.split_once('e') {
            Some((m, e)) => (m, Some(e)),
            None => (body, None),
        };
        let (int, frac) = match mant.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (mant, None),
        };
        let digits = |d: &str| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit());
        let ok_mant = match frac {
            None => digits(int),
            Some(f) => {
                (digits(int) && (f.is_empty() || digits(f))) || (int.is_empty() && digits(f))
            }
        };
        let ok_exp = exp.is_none_or(|e| digits(e.strip_prefix(['+', '-']).unwrap_or(e)));
        if !ok_mant || !ok_exp {
            return Err(format!("not a number: {s:?}"));
        }
    }
    s.parse::<f64>()
        .or_else(|_| match body {
            "inf" | "infinity" if l.starts_with('-') => Ok(f64::NEG_INFINITY),
            "inf" | "infinity" => Ok(f64::INFINITY),
            _ => Err(()),
        })
        .map_err(|_| format!("not a number: {s:?}"))
}

/// `name{labels} value [timestamp]` → sample.
fn sample(line: &str) -> Result<Sample, String> {
    let name_end = line
        .find(['{', ' '])
        .ok_or_else(|| format!("no value: {line:?}"))?;
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        if let Some(r) = rest.strip_prefix('}') {
            rest = r;
        } else {
            loop {
                let eq = rest.find('=').ok_or("label without =")?;
                let ln = &rest[..eq];
                if !is_label_name(ln) {
                    return Err(format!("bad label name {ln:?}"));
                }
                let r = rest[eq + 1..]
                    .strip_prefix('"')
                    .ok_or("label value not quoted")?;
                let (v, r) = unescape(r)?;
                let r = r.strip_prefix('"').ok_or("label value not closed")?;
                if labels.iter().any(|(n, _): &(String, String)| n == ln) {
                    return Err(format!("label {ln:?} twice"));
                }
                labels.push((ln.to_string(), v));
                if let Some(r) = r.strip_prefix(',') {
                    rest = r;
                } else if let Some(r) = r.strip_prefix('}') {
                    rest = r;
                    break;
                } else {
                    return Err(format!("after a label: {r:?}"));
                }
            }
        }
    }
    let rest = rest.strip_prefix(' ').ok_or("no space before the value")?;
    let mut parts = rest.split(' ');
    let value = number(parts.next().unwrap_or(""))?;
    if let Some(ts) = parts.next() {
        number(ts)?;
    }
    if parts.next().is_some() {
        return Err(format!("trailing fields (exemplars unsupported): {line:?}"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// The sample names a family of `kind` named `f` owns.
fn owned(f: &str, kind: &str) -> Vec<String> {
    match kind {
        "counter" => vec![format!("{f}_total"), format!("{f}_created")],
        "info" => vec![format!("{f}_info")],
        _ => vec![f.to_string()],
    }
}

/// Checks `text` against the format's rules; returns its families.
pub fn check(text: &str) -> Result<Vec<Family>, String> {
    if text.contains('\r') {
        return Err("carriage return".into());
    }
    let body = text
        .strip_suffix("# EOF\n")
        .or_else(|| text.strip_suffix("# EOF"))
        .ok_or("does not end with # EOF")?;
    if !(body.is_empty() || body.ends_with('\n')) {
        return Err("# EOF is not a line of its own".into());
    }
    let mut families: Vec<Family> = Vec::new();
    let mut names: HashSet<String> = HashSet::new();
    // The current family, whether it has samples, and its label sets.
    let mut has_samples = false;
    let mut sets: Vec<Vec<(String, String)>> = Vec::new();
    let mut seen: HashSet<(String, Vec<(String, String)>)> = HashSet::new();
    for line in body.lines() {
        if let Some(meta) = line.strip_prefix('#') {
            let meta = meta.strip_prefix(' ').ok_or("# without a space")?;
            let (what, rest) = meta.split_once(' ').ok_or(format!("bad line {line:?}"))?;
            if what == "EOF" {
                return Err("# EOF before the end".into());
            }
            let (name, value) = rest.split_once(' ').unwrap_or((rest, ""));
            if !is_metric_name(name) {
                return Err(format!("bad family name {name:?}"));
            }
            let same = families.last().is_some_and(|f| f.name == name) && !has_samples;
            if !same {
                if !names.insert(name.to_string()) {
                    return Err(format!("family {name} appears twice (or interleaved)"));
                }
                families.push(Family {
                    name: name.into(),
                    kind: "unknown".into(),
                    help: None,
                    unit: None,
                    samples: vec![],
                });
                has_samples = false;
                sets.clear();
            }
            let f = families.last_mut().unwrap();
            match what {
                "TYPE" => {
                    if f.kind != "unknown" || f.help.is_some() || f.unit.is_some() {
                        // TYPE first (SHOULD), and once (MUST): be strict.
                        return Err(format!("TYPE of {name} not first or twice"));
                    }
                    if !matches!(value, "counter" | "gauge" | "info" | "unknown") {
                        return Err(format!("type {value:?} (unsupported or invalid)"));
                    }
                    f.kind = value.into();
                }
                "HELP" => {
                    if f.help.is_some() {
                        return Err(format!("two HELP lines for {name}"));
                    }
                    let (h, rest) = unescape(value)?;
                    if !rest.is_empty() {
                        return Err(format!("unescaped quote in HELP of {name}"));
                    }
                    f.help = Some(h);
                }
                "UNIT" => {
                    if f.unit.is_some() {
                        return Err(format!("two UNIT lines for {name}"));
                    }
                    if !value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                    {
                        return Err(format!("bad unit {value:?}"));
                    }
                    if !value.is_empty() && !name.ends_with(&format!("_{value}")) {
                        return Err(format!("unit {value} is not the suffix of {name}"));
                    }
                    if matches!(f.kind.as_str(), "info" | "stateset") && !value.is_empty() {
                        return Err(format!("{} {name} with a unit", f.kind));
                    }
                    f.unit = Some(value.into());
                }
                _ => return Err(format!("unknown # line {line:?}")),
            }
            continue;
        }
        let s = sample(line)?;
        let belongs = families
            .last()
            .is_some_and(|f| owned(&f.name, &f.kind).contains(&s.name));
        if !belongs {
            // A sample of a new family with no metadata: type unknown.
            if !names.insert(s.name.clone()) {
                return Err(format!("sample {} outside its family", s.name));
            }
            families.push(Family {
                name: s.name.clone(),
                kind: "unknown".into(),
                help: None,
                unit: None,
                samples: vec![],
            });
            sets.clear();
        }
        has_samples = true;
        let f = families.last_mut().unwrap();
        match f.kind.as_str() {
            "counter" if s.name.ends_with("_total") && (s.value.is_nan() || s.value < 0.0) => {
                return Err(format!("counter {} is {}", s.name, s.value));
            }
            "info" if s.value != 1.0 => return Err(format!("info {} is not 1", s.name)),
            _ => {}
        }
        if !seen.insert((s.name.clone(), s.labels.clone())) {
            return Err(format!("sample {}{:?} twice", s.name, s.labels));
        }
        if sets.last() != Some(&s.labels) {
            if sets.contains(&s.labels) {
                return Err(format!("metric {}{:?} interleaved", f.name, s.labels));
            }
            sets.push(s.labels.clone());
        }
        f.samples.push(s);
    }
    // No family's name may be a sample name of another (foo vs foo_total).
    let mut owner: HashMap<String, &str> = HashMap::new();
    for f in &families {
        for n in owned(&f.name, &f.kind).into_iter().chain([f.name.clone()]) {
            if let Some(o) = owner.insert(n.clone(), &f.name) {
                if o != f.name {
                    return Err(format!("{n} clashes between {o} and {}", f.name));
                }
            }
        }
    }
    Ok(families)
}

/// The exposition's value of `family` for the series whose labels include
/// all of `labels`.
pub fn value(fams: &[Family], sample: &str, labels: &[(&str, &str)]) -> Option<f64> {
    fams.iter()
        .flat_map(|f| &f.samples)
        .find(|s| {
            s.name == sample
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
        })
        .map(|s| s.value)
}

/// The checker rejects what the format forbids (so a pass means something).
pub fn self_test() {
    let no_eof = "# TYPE a_seconds counter\n# UNIT a_seconds seconds\n";
    assert!(check(no_eof).is_err(), "no # EOF");
    let ok =
        "# TYPE a_seconds counter\n# UNIT a_seconds seconds\n# HELP a_seconds x \\\" \\\\ \\n\n\
              a_seconds_total{l=\"v\\\"\\n\"} 1\na_seconds_created{l=\"v\\\"\\n\"} 1.5e3\n\
              # TYPE g gauge\ng 1.0\ng{x=\"1\"} -Inf\nuntyped 3\n# EOF\n";
    let fams = check(ok).unwrap();
    assert_eq!(fams.len(), 3);
    assert_eq!(fams[0].help.as_deref(), Some("x \" \\ \n"));
    assert_eq!(fams[0].samples[0].labels[0].1, "v\"\n");
    for (bad, why) in [
        (
            "# TYPE a counter\na 1\n# EOF\n",
            "counter sample without _total",
        ),
        ("# TYPE a counter\na_total -1\n# EOF\n", "negative counter"),
        ("# TYPE a counter\na_total NaN\n# EOF\n", "NaN counter"),
        (
            "# TYPE a gauge\na 1\n# TYPE a gauge\n# EOF\n",
            "repeated family",
        ),
        (
            "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na 2\n# EOF\n",
            "interleaved families",
        ),
        (
            "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"2\"} 1\na{x=\"1\"} 2\n# EOF\n",
            "interleaved metrics",
        ),
        ("# TYPE a gauge\na 1\na 1\n# EOF\n", "duplicate sample"),
        (
            "# TYPE a gauge\n# UNIT a seconds\n# EOF\n",
            "unit not a suffix",
        ),
        (
            "# TYPE a gauge\n# HELP a x\n# HELP a y\n# EOF\n",
            "two HELP",
        ),
        (
            "# TYPE a gauge\n# HELP a x \"y\"\n# EOF\n",
            "unescaped quote in HELP",
        ),
        ("# TYPE a gauge\na{x=\"\\q\"} 1\n# EOF\n", "bad escape"),
        (
            "# TYPE a gauge\na{x=\"1\",x=\"2\"} 1\n# EOF\n",
            "label twice",
        ),
        (
            "# TYPE a gauge\na{_x=\"1\"} 1\n# EOF\n",
            "reserved label name",
        ),
        ("# TYPE a gauge\na 1,0\n# EOF\n", "bad number"),
        ("# TYPE 1a gauge\n# EOF\n", "bad name"),
        ("# TYPE a histogram\n# EOF\n", "unsupported type"),
        ("# TYPE a gauge\na 1\n# EOF\n# EOF\n", "two EOF"),
        ("# TYPE a gauge\r\na 1\n# EOF\n", "carriage return"),
        ("# comment\n# EOF\n", "other # line"),
        (
            "# TYPE a counter\n# TYPE a_total gauge\n# EOF\n",
            "clashing families",
        ),
        ("# TYPE a gauge\na 1 # {} 1\n# EOF\n", "trailing fields"),
    ] {
        assert!(check(bad).is_err(), "accepted ({why}): {bad:?}");
    }
}
