//! The wallet panel (docs/control-plane.md, "The guarded surrender"): what each owner
//! holds for this host — the grants it issued to this host, the accounts this host
//! owns there — from what is retained, the confirmation of a surrender drawn from the
//! same, and the last surrender asked from this page. Pure, like every panel.

use maud::{Markup, html};

use super::page::{OwnerLine, View, ago, capped, cell, shown, table};
use super::retained::{Entry, Known, surrender_subject};

/// How a surrender's failure begins when it was sent and no signed receipt came back:
/// whether the issuer took it is then unknown (every other failure sent nothing).
pub const NO_RECEIPT: &str = "no signed receipt: ";

/// The grants of an observation issued to `host`.
fn held<'v>(observation: &'v serde_json::Value, host: &str) -> Vec<&'v serde_json::Value> {
    observation
        .get("grants")
        .and_then(|g| g.as_array())
        .map(|grants| {
            grants
                .iter()
                .filter(|g| g.get("caller").and_then(|c| c.as_str()) == Some(host))
                .collect()
        })
        .unwrap_or_default()
}

fn units(grant: &serde_json::Value, key: &str) -> u64 {
    grant
        .get(key)
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}

/// The units of a retained grant its issuer would give back: neither reserved,
/// consumed, surrendered nor unknown.
fn available(grant: &serde_json::Value) -> u64 {
    ["reserved", "consumed", "surrendered", "unknown"]
        .iter()
        .fold(units(grant, "allocated"), |a, k| {
            a.saturating_sub(units(grant, k))
        })
}

/// The wallet panel of one owner: what it holds for this host, and the guarded
/// surrender of a grant it issued to this host.
pub(super) fn panel(view: &View, o: &OwnerLine, entry: &Entry) -> Markup {
    let observation = shown(entry);
    let grants: Vec<&serde_json::Value> = observation
        .map(|ob| held(ob, view.host))
        .unwrap_or_default();
    let rows: Vec<serde_json::Value> = grants
        .iter()
        .map(|g| {
            serde_json::json!({
                "grant": g.get("name"),
                "allocated": units(g, "allocated"),
                "reserved": units(g, "reserved"),
                "consumed": units(g, "consumed"),
                "surrendered": units(g, "surrendered"),
                "unknown": units(g, "unknown"),
                "available": available(g),
                "retired": g.get("retired"),
                "settlement": if g.get("settlement").is_some_and(|s| !s.is_null()) { "settled" } else { "not settled" },
            })
        })
        .collect();
    let accounts: Vec<serde_json::Value> = observation
        .and_then(|ob| ob.get("ledgers"))
        .and_then(|l| l.as_array())
        .map(|ledgers| {
            ledgers
                .iter()
                .flat_map(|l| {
                    let ledger = l.get("name").cloned();
                    l.get("accounts")
                        .and_then(|a| a.as_array())
                        .into_iter()
                        .flatten()
                        .filter(|a| a.get("owner").and_then(|w| w.as_str()) == Some(view.host))
                        .map(move |a| {
                            serde_json::json!({
                                "ledger": ledger,
                                "account": a.get("name"),
                                "currency": a.get("currency"),
                                "retired": a.get("retired"),
                            })
                        })
                })
                .collect()
        })
        .unwrap_or_default();
    let confirming = view
        .surrender
        .filter(|_| view.selected == Some(o.name) && o.membership.is_some());
    // A grant surrendered from this page after the observation shown was made: the
    // table is older than the surrender, and says so.
    let since = view
        .retained
        .entry(&surrender_subject(o.name))
        .filter(|s| matches!(s.known, Known::Retained | Known::Kept) && s.at > entry.at)
        .and_then(|s| s.observation.as_ref())
        .and_then(|r| r.get("grant"))
        .and_then(|g| g.as_str());
    html! {
        @if o.membership.is_some() {
            (surrendered(view, o))
        }
        @if observation.is_some() {
            h4 { "Grants " (o.name) " issued to " (view.host) }
            (table(Some(&serde_json::Value::Array(rows)), None))
            @if let Some(grant) = since {
                p.notice { "Grant " (grant) " was surrendered after this observation was made: inspect " (o.name) " now to see it as it holds it." }
            }
            @if o.membership.is_some() {
                ul.surrenders {
                    @for g in &grants {
                        @let name = g.get("name").and_then(|n| n.as_str()).unwrap_or_default();
                        @if !g.get("retired").and_then(serde_json::Value::as_bool).unwrap_or(false) && since != Some(name) {
                            li {
                                a href=(format!("/panel/wallet?owner={}&surrender={}", encoded(o.name), encoded(name))) {
                                    "Surrender grant " (name) "…"
                                }
                            }
                        }
                    }
                }
            }
            h4 { "Ledger accounts " (view.host) " owns at " (o.name) }
            (table(Some(&serde_json::Value::Array(accounts)), None))
            p { "Balances are the keeper's, asked with " code { "gridctl wallet show --host " (view.host) } ": this page retains none." }
        }
        @if let Some(grant) = confirming {
            (confirm(view, o, grant, grants.iter().copied().find(|g| g.get("name").and_then(|n| n.as_str()) == Some(grant))))
        }
    }
}

fn encoded(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The confirmation of a surrender, from what is retained of the grant: refused here
/// already when it shows units reserved or unknown; the issuer is asked again, just
/// before the surrender is sent.
fn confirm(view: &View, o: &OwnerLine, grant: &str, held: Option<&serde_json::Value>) -> Markup {
    let back = format!("/panel/wallet?owner={}", encoded(o.name));
    html! {
        div.confirm role="group" aria-labelledby="confirm-title" data-grant=(grant) {
            h4 id="confirm-title" { "Surrender grant " (grant) " at " (o.name) }
            @match held {
                None => {
                    p role="alert" { "As last retained, " (o.name) " holds no grant " code { (grant) } " issued to " (view.host) ". Inspect " (o.name) " now, then choose again." }
                }
                Some(g) if units(g, "reserved") > 0 || units(g, "unknown") > 0 => {
                    p.refused role="alert" {
                        "Refused: unresolved effects under grant " (grant) ": " (units(g, "unknown")) " unknown and " (units(g, "reserved")) " reserved unit(s) at " (o.name)
                        ", as last retained. Resolve them first; nothing is surrendered."
                    }
                }
                Some(g) if available(g) == 0 => {
                    p role="alert" { "Grant " (grant) " has no available unit to surrender, as last retained." }
                }
                Some(g) => {
                    @let units = available(g);
                    p {
                        (o.name) " gives back every available unit of " (grant) " when it takes the surrender — "
                        strong { (units) " unit(s)" } " as last retained — and no run may reserve it again. "
                        "This cannot be undone. " (o.name) " is asked again just before: the surrender is refused, nothing sent, if it then holds any other number, units reserved or unknown, or this host has an open wait there."
                    }
                    form method="post" action="/surrender" {
                        input type="hidden" name="csrf" value=(view.csrf);
                        input type="hidden" name="owner" value=(o.name);
                        input type="hidden" name="grant" value=(grant);
                        input type="hidden" name="units" value=(units);
                        input type="hidden" name="back" value=(back);
                        input type="hidden" name="asker" value="";
                        input type="checkbox" id="confirm" name="confirm" value=(grant) required;
                        " "
                        label for="confirm" { "I surrender the " (units) " available unit(s) of grant " (grant) " at " (o.name) "." }
                        " "
                        button type="submit" { "Surrender " (units) " unit(s) of " (grant) }
                    }
                }
            }
            p { a href=(back) { "Do not surrender" } }
        }
    }
}

/// The last surrender asked at `o` from this plane: its verified receipt, or why there
/// is none.
fn surrendered(view: &View, o: &OwnerLine) -> Markup {
    let Some(entry) = view.retained.entry(&surrender_subject(o.name)) else {
        return html! {};
    };
    let age = entry.at.map(|at| ago(view.now, at));
    html! {
        div.surrender data-state=(entry.known.word()) data-pending=(entry.pending.is_some()) {
            h4 { "Last surrender at " (o.name) }
            @match (&entry.known, age, entry.observation.as_ref()) {
                (Known::Retained | Known::Kept, Some(s), Some(receipt)) => {
                    p { strong { "Surrendered" } ", " span data-age-s=(s) { (s) " s" } " ago: " (cell(receipt.get("detail").unwrap_or(&serde_json::Value::Null))) }
                    (table(Some(&serde_json::Value::Array(vec![receipt.clone()])), Some(&["grant", "issuer", "confirmed", "surrendered", "reserved", "unknown", "signature_verified", "verified_with"])))
                }
                (Known::Unreachable { reason }, _, _) => {
                    @if reason.starts_with(NO_RECEIPT) {
                        p role="alert" { strong { "Unknown" } ": sent, and " (capped(reason)) }
                    } @else {
                        p role="alert" { strong { "Not surrendered" } ": " (capped(reason)) }
                    }
                }
                (Known::Uncertain, _, _) => {
                    p { strong { "Uncertain" } ": the surrender ended after the panel that asked was closed. Inspect " (o.name) " now to know what it holds." }
                }
                _ => { p { "No surrender asked from this page since this host started." } }
            }
            @if let Some((_, asked)) = entry.pending {
                p { em { "A surrender is under way (asked " (ago(view.now, asked)) " s ago)." } }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use super::*;
    use crate::control::retained::Retained;

    #[test]
    fn a_surrender_sent_without_a_receipt_reads_unknown_and_one_refused_not_surrendered() {
        let issuer = OwnerLine {
            name: "plant",
            membership: Some("ops"),
            address: Some("127.0.0.1:7692"),
        };
        let subject = surrender_subject("plant");
        for (reason, word) in [
            (format!("{NO_RECEIPT}plant did not answer"), "Unknown"),
            (
                "refused: … nothing was surrendered".to_owned(),
                "Not surrendered",
            ),
        ] {
            let mut retained = Retained::new([subject.as_str()]);
            let ticket = retained.begin(&subject, SystemTime::now()).unwrap();
            retained.finish(&subject, ticket, Err(reason), SystemTime::now());
            let view = View {
                host: "hq",
                owners: Vec::new(),
                retained: &retained,
                now: SystemTime::now(),
                csrf: "token",
                barriers: &[],
                selected: Some("plant"),
                surrender: None,
                notice: None,
                locked: false,
            };
            let html = surrendered(&view, &issuer).into_string();
            assert!(html.contains(&format!("<strong>{word}</strong>")), "{html}");
            assert!(html.contains("data-state=\"unreachable\""), "{html}");
        }
    }
}
