//! `decision` nodes (issue 35, docs/decisions.md): a fixed roster, a threshold of
//! ballots in favour, a human gate, one effect, an expiry.

use kdl::KdlValue;

use super::*;

/// The lines a decision holds.
const LINES: [&str; 5] = [
    "roster",
    "threshold",
    "human-gate",
    "effect",
    "expires-after-hours",
];

impl FileReader<'_> {
    pub(super) fn decision(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "decision");
        let label = format!("decision `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let first = self.parsed.references.len();
        let host = self.host_ref(&mut n, "host", &label);
        if let Some(reference) = self.parsed.references.get_mut(first) {
            reference.require = Some(Requirement::Selects(
                Profile::Decisions,
                "keeping decisions needs",
            ));
        }
        let mut roster: Vec<(String, SourceSpan)> = Vec::new();
        let mut threshold: Option<(u32, SourceSpan)> = None;
        let mut gate: Option<String> = None;
        let mut effect: Option<DecisionEffect> = None;
        let mut expires: Option<u32> = None;
        let mut seen: Vec<(String, SourceSpan)> = Vec::new();
        for child in n.children(self) {
            let kind = child.name().value();
            let mut c = NodeReader::new(child);
            if let Some((_, first_span)) = seen.iter().find(|(k, _)| k == kind) {
                let d = Diagnostic::at(
                    &self.file,
                    child.name().span(),
                    format!("{label}: `{kind}` is given twice"),
                    "second",
                )
                .with_label(*first_span, "first")
                .with_help(format!("one `{kind}` line per decision"));
                self.problems.push(d);
                c.skip_all();
                c.finish(self);
                continue;
            }
            seen.push((kind.to_owned(), child.name().span()));
            if LINES.contains(&kind) {
                c.no_children(self);
            }
            match kind {
                "roster" => {
                    for (member, span) in c.string_args(self, "roster member") {
                        if roster.iter().any(|(m, _)| *m == member) {
                            self.error(
                                span,
                                format!("{label}: `{member}` is on the roster twice"),
                                "twice",
                                "each roster member casts one ballot: name it once",
                            );
                            continue;
                        }
                        self.shares_with(&member, span, &format!("{label} roster member"), &host);
                        roster.push((member, span));
                    }
                    if roster.is_empty() {
                        self.error(
                            child.name().span(),
                            format!("{label}: the roster names nobody"),
                            "empty roster",
                            "name the hosts that cast ballots: roster site-a site-b",
                        );
                    } else if roster.len() > limits::DECISION_ROSTER_MAX {
                        self.error(
                            child.name().span(),
                            format!(
                                "{label}: a roster of {} members, above DECISION_ROSTER_MAX ({})",
                                roster.len(),
                                limits::DECISION_ROSTER_MAX
                            ),
                            "too many",
                            "a decision's roster is fixed and signed whole when it opens",
                        );
                    }
                }
                "threshold" => {
                    threshold = self.count_arg(
                        &mut c,
                        &label,
                        "threshold",
                        (1, "1"),
                        (limits::DECISION_ROSTER_MAX as i128, "DECISION_ROSTER_MAX"),
                    );
                }
                "human-gate" => {
                    if let Some((operator, span)) = c.string_prop(self, "operator", true) {
                        self.shares_with(
                            &operator,
                            span,
                            &format!("{label} `human-gate operator`"),
                            &host,
                        );
                        gate = Some(operator);
                    }
                }
                "effect" => effect = self.decision_effect(&mut c, &label),
                "expires-after-hours" => {
                    expires = self
                        .count_arg(
                            &mut c,
                            &label,
                            "expires-after-hours",
                            (1, "1"),
                            (
                                limits::DECISION_EXPIRY_HOURS_MAX as i128,
                                "DECISION_EXPIRY_HOURS_MAX",
                            ),
                        )
                        .map(|(hours, _)| hours);
                }
                other => {
                    self.error(
                        child.name().span(),
                        format!("{label}: unknown line `{other}`"),
                        "not a decision line",
                        "a decision holds roster, threshold, human-gate, effect and expires-after-hours",
                    );
                    c.skip_all();
                }
            }
            c.finish(self);
        }
        n.finish(self);
        let Some((name, span)) = name else {
            return;
        };
        for (line, present) in [
            ("roster", !roster.is_empty()),
            ("threshold", threshold.is_some()),
            ("human-gate", gate.is_some()),
            ("effect", effect.is_some()),
            ("expires-after-hours", expires.is_some()),
        ] {
            if !present && !seen.iter().any(|(k, _)| k == line) {
                self.error(
                    span,
                    format!("{label} needs its `{line}` line"),
                    "incomplete",
                    "a decision holds roster, threshold, human-gate operator=HOST, effect and expires-after-hours",
                );
            }
        }
        if let Some((threshold, t_span)) = threshold
            && !roster.is_empty()
            && threshold as usize > roster.len()
        {
            self.error(
                t_span,
                format!(
                    "{label}: a threshold of {threshold} ballots in favour, above its roster of {}",
                    roster.len()
                ),
                "above the roster",
                "the threshold is at most the number of roster members",
            );
            return;
        }
        if let (Some(host), Some((threshold, _)), Some(gate), Some(effect), Some(expires)) =
            (host, threshold, gate, effect, expires)
            && !roster.is_empty()
        {
            let origin = self.origin(span);
            self.parsed.topology.decisions.push(Decision {
                name,
                host,
                roster: roster.into_iter().map(|(m, _)| m).collect(),
                threshold,
                gate,
                effect,
                expires_after_hours: expires,
                origin,
            });
        }
    }

    /// A host named by a decision's roster or gate: declared, and sharing a membership
    /// with the decision's host (its ballots and approval reach it over mutual TLS).
    fn shares_with(&mut self, name: &str, span: SourceSpan, context: &str, host: &Option<String>) {
        self.parsed.references.push(Reference {
            kind: RefKind::Host,
            name: name.to_owned(),
            file: self.file.clone(),
            span,
            context: context.to_owned(),
            require: host.clone().map(Requirement::SharesWith),
        });
    }

    /// The one positional whole number of a decision's line, within named limits.
    fn count_arg(
        &mut self,
        c: &mut NodeReader,
        label: &str,
        line: &str,
        (min, min_name): (i128, &str),
        (max, max_name): (i128, &str),
    ) -> Option<(u32, SourceSpan)> {
        let Some(entry) = c.positional(0) else {
            c.missing(
                self,
                format!("{label}: `{line}` needs a whole number"),
                format!("for example `{line} 2`"),
            );
            return None;
        };
        match entry.value() {
            KdlValue::Integer(i) if (min..=max).contains(i) => Some((*i as u32, entry.span())),
            KdlValue::Integer(i) => {
                let (side, name, limit) = if *i < min {
                    ("below", min_name, min)
                } else {
                    ("above", max_name, max)
                };
                let named = if name == limit.to_string() {
                    String::new()
                } else {
                    format!(" ({limit})")
                };
                self.error(
                    entry.span(),
                    format!("{label}: `{line}` is {i}, {side} {name}{named}"),
                    "out of range",
                    &format!("`{line}` is from {min_name} ({min}) to {max_name} ({max})"),
                );
                None
            }
            other => {
                self.error(
                    entry.span(),
                    format!(
                        "{label}: `{line}` must be a whole number, found {}",
                        crate::diagnostic::kdl_type(other)
                    ),
                    "wrong type",
                    &format!("for example `{line} 2`"),
                );
                None
            }
        }
    }

    /// `effect "input" model=M input=I` or `effect "ledger.transfer" ledger=L debit=A
    /// credit=B currency=C`.
    fn decision_effect(&mut self, c: &mut NodeReader, label: &str) -> Option<DecisionEffect> {
        let (kind, span) = c.string_arg(self, 0, "kind")?;
        let at = self.origin(span);
        match kind.as_str() {
            "input" => {
                let model = c.string_prop(self, "model", true);
                let input = c.string_prop(self, "input", true);
                Some(DecisionEffect::Input {
                    model: model?.0,
                    input: input?.0,
                    at,
                })
            }
            "ledger.transfer" => {
                let mut prop = |key| c.string_prop(self, key, true).map(|(v, _)| v);
                let (ledger, debit, credit, currency) = (
                    prop("ledger"),
                    prop("debit"),
                    prop("credit"),
                    prop("currency"),
                );
                Some(DecisionEffect::LedgerTransfer {
                    ledger: ledger?,
                    debit: debit?,
                    credit: credit?,
                    currency: currency?,
                    at,
                })
            }
            other => {
                self.error(
                    span,
                    format!(
                        "{label}: effect `{}` is not one a decision applies",
                        crate::diagnostic::quoted(other)
                    ),
                    "unknown effect",
                    "an effect is \"input\" model=M input=I, or \"ledger.transfer\" ledger=L debit=A credit=B currency=C",
                );
                c.skip_all();
                None
            }
        }
    }
}
