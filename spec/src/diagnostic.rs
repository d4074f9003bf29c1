//! Diagnostics: what is wrong in a topology, where, and what to do about it.
//!
//! Every problem found while reading files is collected (never only the first) and
//! reported as one [`Diagnostics`] value; each [`Diagnostic`] is a `miette::Diagnostic`
//! carrying its own source file, so a renderer shows the exact span with a help line.

use std::fmt;
use std::sync::Arc;

use miette::{LabeledSpan, NamedSource, SourceSpan};

use crate::topology::Source;

/// One problem, with its file, span(s) and a help line.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub message: String,
    pub help: Option<String>,
    /// The file this diagnostic points into, when it points into one.
    pub source: Option<Arc<NamedSource<String>>>,
    /// The first label is the primary one.
    pub labels: Vec<LabeledSpan>,
}

impl Diagnostic {
    /// A problem that points into no file (an unreadable path, say).
    pub fn plain(message: impl Into<String>, help: Option<&str>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            help: help.map(str::to_owned),
            source: None,
            labels: Vec::new(),
        }
    }

    /// A problem at `span` of `source`, labelled `label`.
    pub fn at(
        source: &Arc<NamedSource<String>>,
        span: impl Into<SourceSpan>,
        message: impl Into<String>,
        label: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            help: None,
            source: Some(source.clone()),
            labels: vec![LabeledSpan::new_primary_with_span(
                Some(label.into()),
                span.into(),
            )],
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Diagnostic {
        self.help = Some(help.into());
        self
    }

    /// A secondary label in the same file.
    pub fn with_label(mut self, span: impl Into<SourceSpan>, label: impl Into<String>) -> Self {
        self.labels
            .push(LabeledSpan::new_with_span(Some(label.into()), span.into()));
        self
    }

    /// The named limit this diagnostic reports exceeded, when it names one: every error
    /// a limit causes names its constant (`grid_spec::limits`).
    pub fn limit(&self) -> Option<&'static str> {
        let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
        crate::limits::NAMES.iter().copied().find(|name| {
            self.message.match_indices(name).any(|(at, _)| {
                let before = self.message[..at].chars().next_back();
                let after = self.message[at + name.len()..].chars().next();
                !before.is_some_and(word) && !after.is_some_and(word)
            })
        })
    }

    /// The primary span's byte offset, when there is one.
    pub fn offset(&self) -> Option<usize> {
        self.labels.first().map(|l| l.offset())
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.source
            .as_ref()
            .map(|s| s.as_ref() as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().cloned()))
        }
    }
}

/// Every problem found in a set of topology files, in file order.
#[derive(Debug, Clone)]
pub struct Diagnostics {
    pub sources: Vec<Source>,
    pub items: Vec<Diagnostic>,
}

impl Diagnostics {
    pub fn new(sources: Vec<Source>, items: Vec<Diagnostic>) -> Diagnostics {
        Diagnostics { sources, items }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.items.iter()
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.items.len() {
            1 => write!(f, "the topology has 1 error"),
            n => write!(f, "the topology has {n} errors"),
        }
    }
}

impl std::error::Error for Diagnostics {}

impl miette::Diagnostic for Diagnostics {
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        Some(Box::new(
            self.items.iter().map(|d| d as &dyn miette::Diagnostic),
        ))
    }
}
