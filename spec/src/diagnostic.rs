//! Diagnostics: what is wrong in a topology, where, and what to do about it.
//!
//! Every problem found while reading files is collected (never only the first) and
//! reported as one [`Diagnostics`] value; each [`Diagnostic`] is a `miette::Diagnostic`
//! carrying its own source file, so a renderer shows the exact span with a help line.

use std::fmt;
use std::sync::Arc;

use miette::{LabeledSpan, NamedSource, SourceSpan};

use crate::topology::Source;

/// `text` as a message quotes it: whole up to [`QUOTED_CHARS_MAX`] characters, else
/// its beginning, an ellipsis and its length (`abc… (10,000 characters)`).
///
/// [`QUOTED_CHARS_MAX`]: crate::limits::QUOTED_CHARS_MAX
pub fn quoted(text: &str) -> std::borrow::Cow<'_, str> {
    use crate::limits::QUOTED_CHARS_MAX;
    match text.char_indices().nth(QUOTED_CHARS_MAX) {
        None => std::borrow::Cow::Borrowed(text),
        Some((end, _)) => std::borrow::Cow::Owned(format!(
            "{}… ({} characters, QUOTED_CHARS_MAX {QUOTED_CHARS_MAX} shown)",
            &text[..end],
            text.chars().count()
        )),
    }
}

/// One problem, with its file, span(s) and a help line.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    pub message: String,
    pub help: Option<String>,
    /// The file this diagnostic points into, when it points into one.
    pub source: Option<Arc<NamedSource<String>>>,
    /// The first label is the primary one.
    pub labels: Vec<LabeledSpan>,
    /// `source` as a renderer reads it: a line longer than
    /// `DIAGNOSTIC_LINE_CHARS_MAX` is shown as a window around the span.
    window: Option<Window>,
}

/// A file as diagnostics show it: whole lines, except a long line (a formula of
/// megabytes), of which only a window around the span is read.
#[derive(Debug, Clone)]
struct Window(Arc<NamedSource<String>>);

impl miette::SourceCode for Window {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        use crate::limits::DIAGNOSTIC_LINE_CHARS_MAX as WIDTH;
        let text = self.0.inner().as_str();
        // Spans may point inside a character (a fuzzed file): every index is moved to
        // the character boundary at or before it.
        let floor = |mut i: usize| {
            while !text.is_char_boundary(i) {
                i -= 1;
            }
            i
        };
        let offset = floor(span.offset().min(text.len()));
        let end = floor((offset + span.len()).min(text.len())).max(offset);
        let line_start = text[..offset].rfind('\n').map_or(0, |n| n + 1);
        let line_end = text[end..].find('\n').map_or(text.len(), |n| end + n);
        let long = |from: usize, to: usize| to.saturating_sub(from) > WIDTH;
        let before_long = text[..line_start.saturating_sub(1)]
            .rsplit('\n')
            .take(context_lines_before)
            .any(|l| l.len() > WIDTH);
        let after_long = text[line_end.min(text.len())..]
            .split('\n')
            .skip(1)
            .take(context_lines_after)
            .any(|l| l.len() > WIDTH);
        if !long(line_start, line_end) && !before_long && !after_long {
            return self
                .0
                .read_span(span, context_lines_before, context_lines_after);
        }
        let from = floor(offset.saturating_sub(WIDTH / 2).max(line_start));
        let to = floor((from + WIDTH).min(line_end).max(from));
        let contents = miette::MietteSpanContents::new_named(
            self.0.name().to_owned(),
            &text.as_bytes()[from..to],
            SourceSpan::new(from.into(), to - from),
            text[..from].matches('\n').count(),
            text[line_start..from].chars().count(),
            1,
        )
        .with_language("kdl");
        Ok(Box::new(contents))
    }
}

impl Diagnostic {
    /// A problem that points into no file (an unreadable path, say).
    pub fn plain(message: impl Into<String>, help: Option<&str>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            help: help.map(str::to_owned),
            source: None,
            labels: Vec::new(),
            window: None,
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
            window: Some(Window(source.clone())),
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
        self.window.as_ref().map(|w| w as &dyn miette::SourceCode)
    }

    /// The labels as drawn: none longer than half a window, so each stays inside the
    /// window a long line is shown through (`labels` keeps the whole spans).
    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        use crate::limits::DIAGNOSTIC_LINE_CHARS_MAX as WIDTH;
        if self.labels.is_empty() {
            None
        } else {
            Some(Box::new(self.labels.iter().map(|l| {
                let span = SourceSpan::new(l.offset().into(), l.len().min(WIDTH / 2));
                let label = l.label().map(str::to_owned);
                if l.primary() {
                    LabeledSpan::new_primary_with_span(label, span)
                } else {
                    LabeledSpan::new_with_span(label, span)
                }
            })))
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
        use crate::limits::DIAGNOSTICS_SHOWN_MAX;
        match self.items.len() {
            1 => write!(f, "the topology has 1 error"),
            n if n > DIAGNOSTICS_SHOWN_MAX => write!(
                f,
                "the topology has {n} errors (the first {DIAGNOSTICS_SHOWN_MAX} shown, DIAGNOSTICS_SHOWN_MAX; `gridctl check --json` lists all)"
            ),
            n => write!(f, "the topology has {n} errors"),
        }
    }
}

impl std::error::Error for Diagnostics {}

impl miette::Diagnostic for Diagnostics {
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        Some(Box::new(
            self.items
                .iter()
                .take(crate::limits::DIAGNOSTICS_SHOWN_MAX)
                .map(|d| d as &dyn miette::Diagnostic),
        ))
    }
}

/// What a KDL value is, in words for a diagnostic (`must be a string, found an
/// integer`): the topology's parser and the journeys' use the same.
pub fn kdl_type(value: &kdl::KdlValue) -> &'static str {
    match value {
        kdl::KdlValue::String(_) => "a string",
        kdl::KdlValue::Integer(_) => "an integer",
        kdl::KdlValue::Float(_) => "a number",
        kdl::KdlValue::Bool(_) => "a boolean",
        kdl::KdlValue::Null => "#null",
    }
}
