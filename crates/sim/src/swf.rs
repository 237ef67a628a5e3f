//! The Standard Workload Format (SWF 2.2) of the Parallel Workloads Archive: reader and writer.
//!
//! A file is `;` header lines (`; Key: value` or free comments), then one job per line with 18
//! whitespace-separated numeric fields, `-1` meaning unknown. Plain or gzip-compressed files are
//! read alike (detected by the gzip magic bytes, not the name).

use cosched_core::Machine;
use serde::Serialize;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

pub const FIELDS: usize = 18;

/// Field names, in order, as the SWF definition gives them (used in error messages).
pub const FIELD_NAMES: [&str; FIELDS] = [
    "job number",
    "submit time",
    "wait time",
    "run time",
    "allocated processors",
    "average CPU time",
    "used memory",
    "requested processors",
    "requested time",
    "requested memory",
    "status",
    "user id",
    "group id",
    "executable",
    "queue",
    "partition",
    "preceding job",
    "think time",
];

/// The longest time a field may give: 2^32 s (136 years; archive logs span under 10). Every
/// time becomes microseconds in an `i64`, so the cap keeps any sum of them far from overflow.
pub const MAX_SECONDS: f64 = 4_294_967_296.0;

/// The largest count a non-time, non-processor field may give (user ids, memory in KB, job
/// numbers): 2^53, the largest integer a double holds exactly.
pub const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

/// The largest value field `index` (0-based) may hold by the format; the smallest is always -1
/// (unknown).
fn field_limit(index: usize) -> f64 {
    match index {
        // submit, wait, run, average CPU time, requested time, think time
        1 | 2 | 3 | 5 | 8 | 17 => MAX_SECONDS,
        // allocated and requested processors
        4 | 7 => f64::from(Machine::MAX_PROCS),
        _ => MAX_COUNT,
    }
}

/// Whether a value outside the format's range in field `index` (0-based) refuses the log. The
/// replay reads submit, run time, allocated and requested processors and requested time: a
/// wrong value there changes the schedule, so it stays an error. Archive logs hold values the
/// format's text does not allow in other fields (Sandia-Ross: status -4; user ids -2): those are
/// kept as read and tallied. Requested memory (field 10) is lenient too: memory-fit admission
/// judges a value at its use (a negative one is unknown, one larger than a node refuses the
/// job) rather than have the reader refuse every log holding one.
fn replay_reads(index: usize) -> bool {
    matches!(index, 1 | 3 | 4 | 7 | 8)
}

/// One job line. Values are kept as read (fractional CPU times exist in some logs).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub fields: [f64; FIELDS],
}

impl Record {
    pub fn unknown() -> Self {
        Record {
            fields: [-1.0; FIELDS],
        }
    }

    fn int(&self, index: usize) -> i64 {
        self.fields[index] as i64
    }

    pub fn job_number(&self) -> i64 {
        self.int(0)
    }
    pub fn submit(&self) -> i64 {
        self.int(1)
    }
    pub fn run_time(&self) -> i64 {
        self.int(3)
    }
    pub fn allocated_procs(&self) -> i64 {
        self.int(4)
    }
    pub fn requested_procs(&self) -> i64 {
        self.int(7)
    }
    pub fn requested_time(&self) -> i64 {
        self.int(8)
    }
    /// KB per processor.
    pub fn requested_memory(&self) -> i64 {
        self.int(9)
    }

    /// Allocated processors (field 5), falling back to requested (field 8) when unknown.
    pub fn procs(&self) -> i64 {
        match self.allocated_procs() {
            n if n > 0 => n,
            _ => self.requested_procs(),
        }
    }
}

/// The header: every `;` line kept verbatim, plus the `Key: value` pairs found in them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    pub lines: Vec<String>,
}

impl Header {
    /// The value of the first `; Key: value` line with this key (case-insensitive).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.lines.iter().find_map(|line| {
            let (k, v) = line.trim_start_matches(';').split_once(':')?;
            k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
        })
    }

    /// The leading integer of a value, so "338 (batch partition; 512 total)" gives 338.
    pub fn get_int(&self, key: &str) -> Option<i64> {
        let value = self.get(key)?;
        let digits: String = value.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits.parse().ok()
    }

    /// The machine size the log declares: MaxProcs, else MaxNodes.
    pub fn max_procs(&self) -> Option<i64> {
        self.get_int("MaxProcs")
            .or_else(|| self.get_int("MaxNodes"))
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    pub header: Header,
    pub records: Vec<Record>,
    /// Values outside the format's range that were kept as read (fields the replay ignores).
    pub out_of_range: OutOfRangeTally,
}

/// The records holding values outside the format's range in fields the replay does not read,
/// by field. Such values are kept as read, so the writer gives them back unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OutOfRangeTally {
    /// Records with at least one such value.
    pub records: u64,
    /// One entry per field concerned, in field order.
    pub fields: Vec<FieldTally>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FieldTally {
    /// 1-based, as the SWF definition numbers fields.
    pub field: usize,
    pub name: &'static str,
    pub records: u64,
    pub first_line: usize,
}

impl OutOfRangeTally {
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Counts one record's out-of-range fields (0-based indices, in order).
    fn add(&mut self, line: usize, indices: &[usize]) {
        if indices.is_empty() {
            return;
        }
        self.records += 1;
        for &index in indices {
            let field = index + 1;
            match self.fields.binary_search_by_key(&field, |t| t.field) {
                Ok(at) => self.fields[at].records += 1,
                Err(at) => self.fields.insert(
                    at,
                    FieldTally {
                        field,
                        name: FIELD_NAMES[index],
                        records: 1,
                        first_line: line,
                    },
                ),
            }
        }
    }
}

impl std::fmt::Display for OutOfRangeTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural = |n: u64| if n == 1 { "" } else { "s" };
        write!(
            f,
            "{} record{} hold values outside the SWF range in fields the replay does not use, kept as read:",
            self.records,
            plural(self.records)
        )?;
        for (i, t) in self.fields.iter().enumerate() {
            write!(
                f,
                "{} field {} ({}) in {} record{}, first at line {}",
                if i == 0 { "" } else { ";" },
                t.field,
                t.name,
                t.records,
                plural(t.records),
                t.first_line
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// The error is kept as a field, not a source, so it prints once and not again as a cause.
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("{path}:{line}: cannot read: {error} (a damaged or truncated gzip file?)")]
    Damaged {
        path: PathBuf,
        line: usize,
        error: io::Error,
    },
    #[error("{path}:{line}: not UTF-8 text (is this an SWF file?)")]
    NotText { path: PathBuf, line: usize },
    #[error("{path}:{line}: expected {FIELDS} fields, found {found}")]
    FieldCount {
        path: PathBuf,
        line: usize,
        found: usize,
    },
    #[error("{path}:{line}: field {field} ({name}): '{text}' is not a number")]
    NotANumber {
        path: PathBuf,
        line: usize,
        field: usize,
        name: &'static str,
        text: String,
    },
    #[error("{path}:{line}: field {field} ({name}): {text} is out of range (-1 for unknown, or 0 to {limit})")]
    OutOfRange {
        path: PathBuf,
        line: usize,
        field: usize,
        name: &'static str,
        text: String,
        limit: f64,
    },
    #[error("{path}:{line}: field {field} ({name}): {text} is too large to keep exactly (beyond ±{MAX_COUNT})")]
    Overflow {
        path: PathBuf,
        line: usize,
        field: usize,
        name: &'static str,
        text: String,
    },
    #[error("{path}: no job records")]
    Empty { path: PathBuf },
}

/// Reads a plain or gzip-compressed SWF file.
pub fn read_path(path: &Path) -> Result<Trace, SwfError> {
    let file = File::open(path).map_err(|error| SwfError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    read_any(file, path)
}

/// Reads plain or gzip-compressed SWF from a file or a pipe; `path` names it in errors.
pub fn read_any(source: impl Read, path: &Path) -> Result<Trace, SwfError> {
    let mut source = BufReader::new(source);
    let gzipped = source
        .fill_buf()
        .map_err(|error| SwfError::Io {
            path: path.to_path_buf(),
            error,
        })?
        .starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn BufRead> = if gzipped {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(source)))
    } else {
        Box::new(source)
    };
    read(reader, path)
}

/// Reads SWF text; `path` only names the source in errors.
pub fn read(mut reader: impl BufRead, path: &Path) -> Result<Trace, SwfError> {
    let mut trace = Trace::default();
    let mut bytes = Vec::new();
    let mut number = 0;
    loop {
        bytes.clear();
        let read = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|error| SwfError::Damaged {
                path: path.to_path_buf(),
                line: number + 1,
                error,
            })?;
        if read == 0 {
            break;
        }
        number += 1;
        let text = std::str::from_utf8(&bytes)
            .map_err(|_| SwfError::NotText {
                path: path.to_path_buf(),
                line: number,
            })?
            .trim();
        if text.is_empty() {
            continue;
        }
        if text.starts_with(';') {
            trace.header.lines.push(text.to_string());
            continue;
        }
        let (record, odd) = parse_record(text, path, number)?;
        trace.out_of_range.add(number, &odd);
        trace.records.push(record);
    }
    if trace.records.is_empty() {
        return Err(SwfError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(trace)
}

/// A record and the (0-based) fields whose out-of-range values were kept as read.
fn parse_record(text: &str, path: &Path, line: usize) -> Result<(Record, Vec<usize>), SwfError> {
    // A wrong field count is the error to report, even when a bad field comes first.
    let found = || text.split_whitespace().count();
    let field_count = || SwfError::FieldCount {
        path: path.to_path_buf(),
        line,
        found: found(),
    };
    let or_field_count = |error| {
        if found() == FIELDS {
            error
        } else {
            field_count()
        }
    };
    let mut record = Record::unknown();
    let mut odd = Vec::new();
    let mut words = text.split_whitespace();
    for (i, slot) in record.fields.iter_mut().enumerate() {
        let word = words.next().ok_or_else(field_count)?;
        let value = parse_number(word)
            .filter(|v| v.is_finite())
            .ok_or_else(|| {
                or_field_count(SwfError::NotANumber {
                    path: path.to_path_buf(),
                    line,
                    field: i + 1,
                    name: FIELD_NAMES[i],
                    text: word.to_string(),
                })
            })?;
        let limit = field_limit(i);
        if value != -1.0 && !(0.0..=limit).contains(&value) {
            if replay_reads(i) {
                return Err(or_field_count(SwfError::OutOfRange {
                    path: path.to_path_buf(),
                    line,
                    field: i + 1,
                    name: FIELD_NAMES[i],
                    text: word.to_string(),
                    limit,
                }));
            }
            // Past 2^53 a value is not the one written, and the writer could not give it back.
            if value.abs() > MAX_COUNT {
                return Err(or_field_count(SwfError::Overflow {
                    path: path.to_path_buf(),
                    line,
                    field: i + 1,
                    name: FIELD_NAMES[i],
                    text: word.to_string(),
                }));
            }
            odd.push(i);
        }
        *slot = value;
    }
    if words.next().is_some() {
        return Err(field_count());
    }
    Ok((record, odd))
}

/// A field's value. Nearly every field of an archive log is a whole number: those are read
/// as integers (exact below 2^53, as the float parser would give them, at a fraction of its
/// cost over 18 fields of 300,000 lines); anything else goes to the float parser.
fn parse_number(word: &str) -> Option<f64> {
    let (negative, digits) = match word.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, word),
    };
    if (1..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) {
        let whole = digits
            .bytes()
            .fold(0u64, |n, b| n * 10 + u64::from(b - b'0')) as f64;
        return Some(if negative { -whole } else { whole });
    }
    word.parse::<f64>().ok()
}

/// Writes a trace: its header lines as they are, then one line per record.
pub fn write(trace: &Trace, mut out: impl Write) -> io::Result<()> {
    let mut text = String::new();
    for line in &trace.header.lines {
        writeln!(out, "{line}")?;
    }
    for record in &trace.records {
        text.clear();
        for (i, value) in record.fields.iter().enumerate() {
            if i > 0 {
                text.push(' ');
            }
            if value.fract() == 0.0 {
                let _ = write!(text, "{}", *value as i64);
            } else {
                let _ = write!(text, "{value}");
            }
        }
        writeln!(out, "{text}")?;
    }
    out.flush()
}

/// Reads everything from a reader into a trace (for tests and stdin).
pub fn read_bytes(bytes: impl Read, name: &str) -> Result<Trace, SwfError> {
    read(BufReader::new(bytes), Path::new(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "; Version: 2.2\n; MaxNodes: 338 (batch partition; 512 total)\n; Note: free text\n\n1 0 5 100 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 -1\n2 10 -1 50 -1 12.5 -1 8 -1 -1 1 3 1 -1 1 -1 -1 -1\n";

    #[test]
    fn whole_numbers_read_as_the_float_parser_reads_them() {
        let words = [
            "0",
            "-0",
            "-1",
            "7",
            "0042",
            "999999999999999",
            "1000000000000000",
            "9223372036854775808",
            "1.5",
            "-2.25",
            "1e3",
            "+5",
            "-",
            "",
            "12a",
            "inf",
            "NaN",
            "--3",
            "1_000",
        ];
        for word in words {
            let expected = word.parse::<f64>().ok();
            let found = parse_number(word);
            assert_eq!(
                found.map(f64::to_bits),
                expected.map(f64::to_bits),
                "{word:?}"
            );
        }
    }

    #[test]
    fn header_keys_and_leading_integers() {
        let trace = read_bytes(SAMPLE.as_bytes(), "sample.swf").unwrap();
        assert_eq!(trace.header.get("version"), Some("2.2"));
        assert_eq!(trace.header.max_procs(), Some(338));
        assert_eq!(trace.records.len(), 2);
        assert_eq!(trace.records[0].procs(), 4);
        // Allocated unknown: falls back to requested.
        assert_eq!(trace.records[1].procs(), 8);
        assert_eq!(trace.records[1].fields[5], 12.5);
    }

    #[test]
    fn round_trips_through_the_writer() {
        let trace = read_bytes(SAMPLE.as_bytes(), "sample.swf").unwrap();
        let mut out = Vec::new();
        write(&trace, &mut out).unwrap();
        let again = read_bytes(out.as_slice(), "again.swf").unwrap();
        assert_eq!(trace, again);
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("2 10 -1 50 -1 12.5 -1 8"));
    }

    #[test]
    fn errors_name_the_file_line_and_field() {
        let bad = "; x\n1 0 5 100 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 -1\n2 10 -1 fifty -1 -1 -1 8 -1 -1 1 3 1 -1 1 -1 -1 -1\n";
        let err = read_bytes(bad.as_bytes(), "t.swf").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.swf:3: field 4 (run time): 'fifty' is not a number"
        );
        let short = "1 0 5 100\n";
        let err = read_bytes(short.as_bytes(), "t.swf").unwrap_err();
        assert_eq!(err.to_string(), "t.swf:1: expected 18 fields, found 4");
        let err = read_bytes("; only a header\n".as_bytes(), "h.swf").unwrap_err();
        assert_eq!(err.to_string(), "h.swf: no job records");
    }

    #[test]
    fn unreadable_bytes_name_their_line_once() {
        let err = read_bytes(&b"; x\n; y\n\xff\xfe 3\n"[..], "u.swf").unwrap_err();
        assert_eq!(
            err.to_string(),
            "u.swf:3: not UTF-8 text (is this an SWF file?)"
        );
        assert!(std::error::Error::source(&err).is_none());
        let mut gz = Vec::new();
        {
            use flate2::write::GzEncoder;
            let mut encoder = GzEncoder::new(&mut gz, flate2::Compression::default());
            encoder.write_all(SAMPLE.as_bytes()).unwrap();
            encoder.finish().unwrap();
        }
        let dir = std::env::temp_dir().join(format!("cosched-swf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cut = dir.join("cut.swf.gz");
        std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
        let err = read_path(&cut).unwrap_err();
        let text = err.to_string();
        let prefix = format!("{}:", cut.display());
        assert!(
            text.starts_with(&prefix) && text.contains(": cannot read: "),
            "{text}"
        );
        assert!(std::error::Error::source(&err).is_none(), "printed twice");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn every_field_is_range_checked_where_it_is_read() {
        let line = |field: usize, value: &str| {
            let mut words = vec!["1"; FIELDS];
            words[field - 1] = value;
            format!("; x\n{}\n", words.join(" "))
        };
        let err = |field, value| {
            read_bytes(line(field, value).as_bytes(), "r.swf")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(4, "9.3e12"),
            "r.swf:2: field 4 (run time): 9.3e12 is out of range (-1 for unknown, or 0 to 4294967296)"
        );
        assert_eq!(
            err(5, "4294967295"),
            "r.swf:2: field 5 (allocated processors): 4294967295 is out of range (-1 for unknown, or 0 to 16777216)"
        );
        assert!(err(2, "-5").contains("field 2 (submit time): -5 is out of range"));
        assert!(err(12, "1e300").contains("field 12 (user id)"));
        for (field, value) in [(2, "-1"), (4, "4294967296"), (8, "16777216"), (6, "0.5")] {
            assert!(read_bytes(line(field, value).as_bytes(), "ok.swf").is_ok());
        }
        // What the replay reads stays strict, however the value is out of range.
        for (field, value) in [(2, "-2"), (4, "-4"), (5, "-2"), (8, "-3"), (9, "-4")] {
            assert!(
                err(field, value).contains(&format!("field {field} (")),
                "{field} {value}"
            );
        }
        assert!(err(9, "5e9").contains("field 9 (requested time): 5e9 is out of range"));
        assert!(err(8, "16777217").contains("field 8 (requested processors)"));
    }

    /// Records shaped like the archive's (Sandia-Ross: status -4; negative user and group ids,
    /// job numbers past the 2^32 of a time): read, kept as they are, tallied once per field.
    #[test]
    fn unused_fields_out_of_range_are_kept_and_tallied() {
        let text = "; MaxProcs: 64\n\
            1 0 5 100 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 -1\n\
            2 10 -1 50 4 -1 -1 4 200 -1 -4 -2 -2 -1 1 -1 -1 -1\n\
            3 20 -7 50 4 -1 -3 4 200 -5 -4 3 1 -1 1 -1 -1 -1\n\
            9000000000000 30 -1 50 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 7e15\n";
        let trace = read_bytes(text.as_bytes(), "archive.swf").unwrap();
        assert_eq!(trace.records.len(), 4);
        assert_eq!(trace.records[1].fields[10], -4.0);
        assert_eq!(trace.records[1].fields[11], -2.0);
        assert_eq!(trace.records[3].job_number(), 9_000_000_000_000);
        let tally = &trace.out_of_range;
        assert_eq!(tally.records, 3);
        let found: Vec<(usize, u64, usize)> = tally
            .fields
            .iter()
            .map(|t| (t.field, t.records, t.first_line))
            .collect();
        // Job number 9e12 is within the 2^53 of a count; think time 7e15 is past 2^32 s.
        assert_eq!(
            found,
            [
                (3, 1, 4),
                (7, 1, 4),
                (10, 1, 4),
                (11, 2, 3),
                (12, 1, 3),
                (13, 1, 3),
                (18, 1, 5)
            ]
        );
        assert_eq!(tally.fields[3].name, "status");
        assert!(tally.to_string().starts_with(
            "3 records hold values outside the SWF range in fields the replay does not use, kept as read: \
             field 3 (wait time) in 1 record, first at line 4; "
        ));
        assert!(tally
            .to_string()
            .contains("field 11 (status) in 2 records, first at line 3;"));

        let mut out = Vec::new();
        write(&trace, &mut out).unwrap();
        let written = String::from_utf8(out.clone()).unwrap();
        assert!(written.contains("\n2 10 -1 50 4 -1 -1 4 200 -1 -4 -2 -2 -1 1 -1 -1 -1\n"));
        assert!(written.contains(
            "\n9000000000000 30 -1 50 4 -1 -1 4 200 -1 1 3 1 -1 1 -1 -1 7000000000000000\n"
        ));
        assert_eq!(read_bytes(out.as_slice(), "again.swf").unwrap(), trace);

        // Past 2^53 a value cannot be held exactly: still refused, in any field.
        let huge = "1 0 5 100 4 -1 -1 4 200 -1 1 -1e300 1 -1 1 -1 -1 -1\n";
        assert_eq!(
            read_bytes(huge.as_bytes(), "h.swf").unwrap_err().to_string(),
            "h.swf:1: field 12 (user id): -1e300 is too large to keep exactly (beyond ±9007199254740992)"
        );
        assert!(read_bytes(SAMPLE.as_bytes(), "s.swf")
            .unwrap()
            .out_of_range
            .is_empty());
    }
}
