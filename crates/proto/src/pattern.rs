//! Output file patterns, as sbatch's `--output`: `%j` the job id, `%x` its name, `%u` its
//! user, `%N` its (first) node, `%%` a percent sign. The client fills in what it knows before
//! submitting (name, user); the job id is known only once submitted, and in a cluster the
//! node only where the job runs, so a pattern may be filled in steps: a field not yet known
//! stays as it was, and the result is again a pattern.

use cosched_core::JobId;

/// What a pattern may name; `None`: not known yet (the field is kept).
#[derive(Clone, Copy, Debug, Default)]
pub struct PatternFields<'a> {
    pub job: Option<JobId>,
    pub name: Option<&'a str>,
    pub user: Option<&'a str>,
    pub node: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("'%{0}' in output pattern {1:?} is not a field: %j (job id), %x (name), %u (user), %N (node) or %% (a percent sign)")]
    Unknown(char, String),
    #[error("output pattern {0:?} ends in a lone '%' (write %% for a percent sign)")]
    Trailing(String),
}

/// `pattern` with the known fields filled in. When every field is known the result is a
/// plain path (`%%` becomes `%`); else it is a pattern still (`%%` kept, and a `%` in a
/// value filled in doubled).
pub fn expand(pattern: &str, fields: &PatternFields) -> Result<String, PatternError> {
    let partial = fields.job.is_none()
        || fields.name.is_none()
        || fields.user.is_none()
        || fields.node.is_none();
    let job = fields.job.map(|job| job.to_string());
    let mut out = String::with_capacity(pattern.len());
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(field) = chars.next() else {
            return Err(PatternError::Trailing(pattern.to_string()));
        };
        let value = match field {
            '%' => {
                out.push_str(if partial { "%%" } else { "%" });
                continue;
            }
            'j' => job.as_deref(),
            'x' => fields.name,
            'u' => fields.user,
            'N' => fields.node,
            other => return Err(PatternError::Unknown(other, pattern.to_string())),
        };
        match value {
            Some(value) if partial => out.push_str(&value.replace('%', "%%")),
            Some(value) => out.push_str(value),
            None => {
                out.push('%');
                out.push(field);
            }
        }
    }
    Ok(out)
}

/// The file a pattern the client filled in before submitting names, once the job's id and
/// node are known (`node` none: `%N` kept, to tell a person where on its nodes).
pub fn fill(pattern: &str, job: JobId, node: Option<&str>) -> String {
    let fields = PatternFields {
        job: Some(job),
        node,
        // The client filled them in: none is left.
        name: Some(""),
        user: Some(""),
    };
    // Checked at submission; a record from before patterns is a plain path.
    expand(pattern, &fields).unwrap_or_else(|_| pattern.to_string())
}

/// Whether `pattern` (a valid one) names `field` (`'j'`: such a file can be named only once
/// the job is submitted; `'N'`: only once it is known where it runs).
pub fn names(pattern: &str, field: char) -> bool {
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' && chars.next() == Some(field) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_filled_in_steps_and_percent_signs_survive() {
        let known = PatternFields {
            name: Some("a%jb"),
            user: Some("ann"),
            ..PatternFields::default()
        };
        let step = expand("/o/%x-%u-%j-%N-100%%.log", &known).unwrap();
        assert_eq!(step, "/o/a%%jb-ann-%j-%N-100%%.log");
        assert!(names(&step, 'j') && names(&step, 'N') && !names(&step, 'x'));
        assert!(!names("/o/a%%jb.log", 'j'));
        let all = PatternFields {
            job: Some(42),
            node: Some("n1"),
            ..known
        };
        assert_eq!(expand(&step, &all).unwrap(), "/o/a%jb-ann-42-n1-100%.log");
    }

    #[test]
    fn bad_patterns_are_named() {
        let none = PatternFields::default();
        let error = expand("out-%A.log", &none).unwrap_err().to_string();
        assert!(error.contains("'%A'"), "{error}");
        let error = expand("out-%", &none).unwrap_err().to_string();
        assert!(error.contains("lone '%'"), "{error}");
    }
}
