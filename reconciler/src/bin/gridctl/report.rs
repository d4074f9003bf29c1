//! How every command prints its result: with `--json` one JSON value on one line,
//! otherwise text for people.

use serde::Serialize;

/// A command's result, printable both ways. The `Serialize` form is the JSON output
/// (field names and order are the public contract); `text` is what people read.
pub trait Report: Serialize {
    /// The text form, every line ending in a newline.
    fn text(&self) -> String;
}

/// Prints `report` on stdout: one line of JSON with `json`, its text otherwise.
pub fn emit(report: &impl Report, json: bool) {
    if json {
        println!(
            "{}",
            serde_json::to_string(report).expect("reports serialize")
        );
    } else {
        print!("{}", report.text());
    }
}

/// Prints a failure: its JSON on stdout with `json` (scripts read one answer there
/// either way), its text on stderr otherwise.
pub fn emit_failure(report: &impl Report, json: bool) {
    if json {
        emit(report, json);
    } else {
        eprint!("{}", report.text());
    }
}

/// A result the library already renders both ways (its `to_json` and `render`).
#[derive(Serialize)]
#[serde(transparent)]
pub struct Rendered {
    json: serde_json::Value,
    #[serde(skip)]
    text: String,
}

impl Rendered {
    pub fn new(json: serde_json::Value, text: String) -> Self {
        Rendered { json, text }
    }
}

impl Report for Rendered {
    fn text(&self) -> String {
        self.text.clone()
    }
}

/// The JSON answer of a command that did not act (or may have): its identifying
/// fields, then `outcome` and `detail`; no text (the command explains on stderr).
#[derive(Serialize)]
pub struct NotDone {
    #[serde(flatten)]
    pub id: serde_json::Value,
    pub outcome: &'static str,
    pub detail: String,
}

impl Report for NotDone {
    fn text(&self) -> String {
        String::new()
    }
}
