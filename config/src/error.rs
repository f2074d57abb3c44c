//! [`ConfigError`]: why a configuration was refused, naming the key, the file and the line.

use std::fmt;
use std::path::PathBuf;

/// Where a refused value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The config file; `line` is 1-based, `None` when the key is not in the file (a default that
    /// clashes with another key, or a required key that is missing with its whole section).
    File {
        /// The file as the caller named it (the path given to [`Config::load`](crate::Config::load),
        /// or `source_name` of [`Config::from_toml_str`](crate::Config::from_toml_str)).
        file: String,
        /// 1-based line of the key, or of its section when the key itself is missing.
        line: Option<usize>,
    },
    /// An environment variable (a `STRATA_*` override).
    Env {
        /// The variable's name.
        var: String,
        /// The variable's value as given.
        value: String,
    },
}

impl Location {
    /// The file name, for a file location.
    pub fn file(&self) -> Option<&str> {
        match self {
            Location::File { file, .. } => Some(file),
            Location::Env { .. } => None,
        }
    }

    /// The 1-based line, for a file location that has one.
    pub fn line(&self) -> Option<usize> {
        match self {
            Location::File { line, .. } => *line,
            Location::Env { .. } => None,
        }
    }

    /// The variable, for an environment location.
    pub fn env_var(&self) -> Option<&str> {
        match self {
            Location::Env { var, .. } => Some(var),
            Location::File { .. } => None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File {
                file,
                line: Some(line),
            } => write!(f, "{file}:{line}"),
            Location::File { file, line: None } => write!(f, "{file}"),
            Location::Env { var, value } => write!(f, "environment variable {var}={value:?}"),
        }
    }
}

/// One refused key (or environment variable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The dotted key, like `kv.block_size`; `None` only for an environment variable whose name
    /// does not name a key at all.
    pub key: Option<String>,
    /// Where the value came from.
    pub location: Location,
    /// What is wrong, and where useful, what is expected.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: `{key}`: {}", self.location, self.message),
            None => write!(f, "{}: {}", self.location, self.message),
        }
    }
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        /// The path given.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{file}:{line}:{column}: invalid TOML: {message}")]
    Syntax {
        /// The file as the caller named it.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Keys with unknown names, wrong types or impossible values; at least one.
    #[error("{}", ProblemList(.0))]
    Invalid(Vec<Problem>),
}

impl ConfigError {
    /// The refused keys (empty for [`ConfigError::Read`] and [`ConfigError::Syntax`]).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid(p) => p,
            ConfigError::Read { .. } | ConfigError::Syntax { .. } => &[],
        }
    }
}

struct ProblemList<'a>(&'a [Problem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "invalid configuration: {one}"),
            many => {
                write!(f, "invalid configuration ({} problems):", many.len())?;
                for p in many {
                    write!(f, "\n  {p}")?;
                }
                Ok(())
            }
        }
    }
}
