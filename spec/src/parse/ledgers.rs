//! `ledger` nodes and their `account` children (SPEC C6, docs/ledger.md).

use super::*;
use crate::limits::{LEDGER_ACCOUNTS_MAX, LEDGER_CURRENCY_LENGTH_MAX, LEDGER_CURRENCY_LENGTH_MIN};
use crate::topology::is_currency;

impl FileReader<'_> {
    pub(super) fn ledger(&mut self, node: &KdlNode) {
        let mut n = NodeReader::new(node);
        let name = self.object_name(&mut n, "ledger");
        let label = format!("ledger `{}`", name.as_ref().map_or("?", |n| n.0.as_str()));
        let first = self.parsed.references.len();
        let host = self.host_ref(&mut n, "host", &label);
        if let Some(reference) = self.parsed.references.get_mut(first) {
            reference.require = Some(Requirement::Selects(
                Profile::Ledger,
                "keeping a ledger needs",
            ));
        }
        let mut accounts: Vec<Account> = Vec::new();
        let mut account_spans: Vec<SourceSpan> = Vec::new();
        for child in n.children(self) {
            let mut c = NodeReader::new(child);
            match child.name().value() {
                "account" => {
                    if let Some((account, span)) = self.account(&mut c, &label) {
                        if let Some(i) = accounts.iter().position(|a| a.name == account.name) {
                            let d = Diagnostic::at(
                                &self.file,
                                span,
                                format!("{label}: account `{}` is declared twice", account.name),
                                "second declaration",
                            )
                            .with_label(account_spans[i], "first declared here")
                            .with_help("account names are unique within a ledger");
                            self.problems.push(d);
                        } else {
                            accounts.push(account);
                            account_spans.push(span);
                        }
                    }
                }
                other => {
                    c.skip_all();
                    self.error(
                        child.name().span(),
                        format!("unknown child `{other}` of ledger"),
                        "not part of a ledger",
                        "a ledger holds `account NAME currency=\"CUR\"` lines",
                    )
                }
            }
            c.no_children(self);
            c.finish(self);
        }
        n.finish(self);
        if accounts.len() > LEDGER_ACCOUNTS_MAX {
            let span = account_spans[LEDGER_ACCOUNTS_MAX];
            self.error(
                span,
                format!(
                    "{label} declares {} accounts, above LEDGER_ACCOUNTS_MAX ({LEDGER_ACCOUNTS_MAX})",
                    accounts.len()
                ),
                "this account and later ones",
                "split the accounts over several ledgers",
            );
        }
        let (Some((name, span)), Some(host)) = (name, host) else {
            return;
        };
        let origin = self.origin(span);
        self.parsed.ledger_spans.push((self.file.clone(), span));
        self.parsed.topology.ledgers.push(Ledger {
            name,
            host,
            accounts,
            origin,
        });
    }

    fn account(&mut self, c: &mut NodeReader, ledger: &str) -> Option<(Account, SourceSpan)> {
        let name = c.string_arg(self, 0, "name");
        let name = match name {
            Some((name, span)) if self.check_name(&name, span, "account") => Some((name, span)),
            _ => None,
        };
        let label = format!(
            "{ledger} account `{}`",
            name.as_ref().map_or("?", |n| n.0.as_str())
        );
        let currency = c
            .string_prop(self, "currency", true)
            .and_then(|(code, span)| {
                if is_currency(&code) {
                    Some(code)
                } else {
                    self.error(
                        span,
                        format!("{label}: `{code}` is not a currency code"),
                        "not a currency code",
                        &format!(
                            "a currency code is LEDGER_CURRENCY_LENGTH_MIN ({LEDGER_CURRENCY_LENGTH_MIN}) to LEDGER_CURRENCY_LENGTH_MAX ({LEDGER_CURRENCY_LENGTH_MAX}) uppercase letters and digits, starting with a letter, for example \"EUR\""
                        ),
                    );
                    None
                }
            });
        let owner = match c.string_prop(self, "owner", false) {
            Some((host, span)) => {
                self.parsed.references.push(Reference {
                    kind: RefKind::Host,
                    name: host.clone(),
                    file: self.file.clone(),
                    span,
                    context: format!("{label} `owner`"),
                    require: None,
                });
                Some(host)
            }
            None => None,
        };
        let debits_span = c.has_property("debits-must-not-exceed-credits");
        let debits = c
            .bool_prop(self, "debits-must-not-exceed-credits")
            .unwrap_or(false);
        let credits = c
            .bool_prop(self, "credits-must-not-exceed-debits")
            .unwrap_or(false);
        let retired = c.bool_prop(self, "retired").unwrap_or(false);
        if debits && credits {
            let span = debits_span.or_else(|| name.as_ref().map(|n| n.1))?;
            self.error(
                span,
                format!(
                    "{label} sets both debits-must-not-exceed-credits and credits-must-not-exceed-debits"
                ),
                "both balance flags",
                "an account with both flags could never move: keep at most one",
            );
            return None;
        }
        let (name, span) = name?;
        Some((
            Account {
                name,
                currency: currency?,
                owner,
                debits_must_not_exceed_credits: debits,
                credits_must_not_exceed_debits: credits,
                retired,
            },
            span,
        ))
    }
}
