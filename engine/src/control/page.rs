//! The control plane's HTML, rendered on the host from what it retained (maud: every
//! value escaped). Nothing here does IO: a page is a pure function of the retained
//! observations, the owners the files name and the time.

use std::time::{Duration, SystemTime};

use maud::{DOCTYPE, Markup, html};

use super::retained::{Entry, Known, Part, Retained, barrier_subject};
use crate::limits::{CONTROL_CELL_CHARS_MAX, CONTROL_PANEL_COLUMNS_MAX, CONTROL_PANEL_ROWS_MAX};

/// One panel: its address (`/panel/SLUG`), its title, and the part of an owner's
/// observation it shows (`None`: the panel is drawn otherwise).
pub struct Panel {
    pub slug: &'static str,
    pub title: &'static str,
    pub key: Option<&'static str>,
    pub about: &'static str,
}

/// Every panel, in the navigation's order.
pub const PANELS: &[Panel] = &[
    Panel {
        slug: "overview",
        title: "Owners",
        key: None,
        about: "Every owner this host reaches, what is known of it and since when.",
    },
    Panel {
        slug: "authority",
        title: "Authority",
        key: None,
        about: "The authority voters this host runs, as they reported when this host was last inspected (the leader each believed: not evidence of a live quorum), and explicit read barriers through each membership's leader.",
    },
    Panel {
        slug: "memberships",
        title: "Memberships",
        key: None,
        about: "The membership each owner is called in and its address, as the files installed them here (no owner is asked).",
    },
    Panel {
        slug: "models",
        title: "Models",
        key: Some("models"),
        about: "Models each owner runs: generation, batches applied, memberships served.",
    },
    Panel {
        slug: "processes",
        title: "Processes",
        key: None,
        about: "The Processes this host serves, its runs by outcome, the runs it received that have not finished and those it sent without an outcome, as its last inspection found them, and one request inspected when asked — read only: nothing here resumes, resolves or replaces a run.",
    },
    Panel {
        slug: "routes",
        title: "Routes",
        key: Some("routes"),
        about: "Routes installed at each owner: publisher, destinations, class.",
    },
    Panel {
        slug: "grants",
        title: "Grants",
        key: Some("grants"),
        about: "Grants each owner issued: units allocated, reserved, consumed, unknown.",
    },
    Panel {
        slug: "wallet",
        title: "Wallet",
        key: None,
        about: "What each owner holds for this host: the grants it issued to this host (allocated, reserved, consumed, surrendered, unknown, available) and the ledger accounts this host owns there — as last retained. A grant's available units are surrendered only explicitly, confirmed by its name and units, and refused while anything of it is unresolved.",
    },
    Panel {
        slug: "sources",
        title: "Sources",
        key: Some("tags"),
        about: "Tags each owner reads: observations journaled, debt, connection.",
    },
    Panel {
        slug: "ledgers",
        title: "Ledgers",
        key: Some("ledgers"),
        about: "Ledgers each owner keeps and their accounts.",
    },
    Panel {
        slug: "missions",
        title: "Missions",
        key: Some("missions"),
        about: "Missions each owner holds as their host.",
    },
    Panel {
        slug: "mappings",
        title: "Exports and mappings",
        key: Some("exports"),
        about: "Disclosures each owner signed and the exports it runs.",
    },
    Panel {
        slug: "decisions",
        title: "Decisions",
        key: Some("decisions"),
        about: "Decision policies installed at each owner: history, never a fresh permission.",
    },
    Panel {
        slug: "storage",
        title: "Storage",
        key: None,
        about: "What each owner's stores hold on disk — keyspaces, journals and what a checkpoint would purge, checkpoints, the archive, the disk — as its last explicit storage inspection found it.",
    },
    Panel {
        slug: "operations",
        title: "Unacknowledged operations",
        key: Some("unacknowledged"),
        about: "Operations whose answer no caller acknowledged: their reply may have been lost.",
    },
];

pub fn find(slug: &str) -> Option<&'static Panel> {
    PANELS.iter().find(|p| p.slug == slug)
}

/// An owner as the page names it.
pub struct OwnerLine<'a> {
    pub name: &'a str,
    /// `None`: this host itself, inspected in its own process.
    pub membership: Option<&'a str>,
    pub address: Option<&'a str>,
}

/// What one page is drawn from.
pub struct View<'a> {
    pub host: &'a str,
    pub owners: Vec<OwnerLine<'a>>,
    pub retained: &'a Retained,
    pub now: SystemTime,
    pub csrf: &'a str,
    /// The memberships whose authority this host runs (a read barrier each).
    pub barriers: &'a [String],
    /// `?owner=NAME`: the one owner shown (kept in the URL across panels).
    pub selected: Option<&'a str>,
    /// `?surrender=G`: the grant whose surrender is being confirmed (wallet panel).
    pub surrender: Option<&'a str>,
    /// A refusal to tell (an inspection not begun).
    pub notice: Option<String>,
    /// The host's custody is locked: what is shown was kept before its restart, and
    /// nothing is asked.
    pub locked: bool,
}

fn query(selected: Option<&str>) -> String {
    selected.map_or_else(String::new, |o| {
        format!(
            "?owner={}",
            url::form_urlencoded::byte_serialize(o.as_bytes()).collect::<String>()
        )
    })
}

pub(super) fn ago(now: SystemTime, then: SystemTime) -> u64 {
    now.duration_since(then).unwrap_or(Duration::ZERO).as_secs()
}

fn stamp(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A value as one short line, capped at CONTROL_CELL_CHARS_MAX characters.
pub(super) fn cell(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "—".to_owned(),
        serde_json::Value::String(s) => capped(s),
        other => capped(&other.to_string()),
    }
}

/// `text`, capped at CONTROL_CELL_CHARS_MAX characters.
pub(super) fn capped(text: &str) -> String {
    if text.chars().count() > CONTROL_CELL_CHARS_MAX {
        let mut capped: String = text.chars().take(CONTROL_CELL_CHARS_MAX).collect();
        capped.push('…');
        capped
    } else {
        text.to_owned()
    }
}

/// The page for `panel`.
pub fn render(view: &View, panel: &Panel) -> String {
    let back = format!("/panel/{}{}", panel.slug, query(view.selected));
    let shown: Vec<&OwnerLine> = view
        .owners
        .iter()
        .filter(|o| view.selected.is_none_or(|s| s == o.name))
        .collect();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (panel.title) " · Grid control plane · " (view.host) }
                link rel="stylesheet" href="/assets/style.css";
                script src="/assets/app.js" defer {}
            }
            body {
                a.skip href="#panel" { "Skip to the panel" }
                header {
                    h1 { "Grid control plane · " (view.host) }
                    p.rule {
                        "Each panel shows what this host retained from each owner, with its age. "
                        "Opening a panel asks no owner anything; only “Inspect now” does."
                    }
                    @if view.locked {
                        p.locked role="status" {
                            strong { "This host's custody is locked." }
                            " The page shows what it kept before its restart, each record verified with the host's public keys; it asks nobody — not this host's rooms, not another owner, no read barrier — until "
                            code { "gridctl custody unlock " (view.host) }
                            "."
                        }
                    }
                }
                nav aria-label="Panels" {
                    ul {
                        @for p in PANELS {
                            li {
                                a href=(format!("/panel/{}{}", p.slug, query(view.selected)))
                                    aria-current=[(p.slug == panel.slug).then_some("page")] { (p.title) }
                            }
                        }
                    }
                }
                nav aria-label="Owners" {
                    ul {
                        li { a href=(format!("/panel/{}", panel.slug)) aria-current=[view.selected.is_none().then_some("true")] { "All owners" } }
                        @for o in &view.owners {
                            li {
                                a href=(format!("/panel/{}{}", panel.slug, query(Some(o.name))))
                                    aria-current=[(view.selected == Some(o.name)).then_some("true")] { (o.name) }
                            }
                        }
                    }
                }
                main id="panel" data-panel=(panel.slug) tabindex="-1" {
                    h2 { (panel.title) }
                    p { (panel.about) }
                    @if let Some(notice) = &view.notice {
                        p.notice role="alert" { (notice) }
                    }
                    @if shown.is_empty() {
                        p { "No owner of that name: choose one above." }
                    }
                    @for o in &shown {
                        (owner(view, panel, o, &back))
                    }
                }
                aside {
                    label for="notes" { "Notes (kept in this browser, across panels)" }
                    textarea id="notes" rows="4" {}
                }
            }
        }
    };
    page.into_string()
}

fn owner(view: &View, panel: &Panel, o: &OwnerLine, back: &str) -> Markup {
    // The storage panel shows the owner's storage, asked apart; every other its
    // observation.
    let part = if panel.slug == "storage" {
        Part::Storage
    } else {
        Part::Observation
    };
    let Some(entry) = view.retained.entry(&part.subject(o.name)) else {
        return html! {};
    };
    let heading = format!("owner-{}", o.name);
    html! {
        section.owner id=(heading) data-owner=(o.name) data-state=(entry.known.word())
            data-pending=(entry.pending.is_some()) aria-labelledby=(format!("{heading}-title")) {
            h3 id=(format!("{heading}-title")) {
                (o.name)
                @if o.membership.is_none() { " (this host)" }
            }
            (state(view.now, entry))
            form method="post" action="/inspect" {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="owner" value=(o.name);
                input type="hidden" name="part" value=(part.word());
                input type="hidden" name="back" value=(back);
                // Filled by the page's script: names this panel's ask, so that the
                // panel says when it closes before the reply (`POST /closed`).
                input type="hidden" name="asker" value="";
                button type="submit" disabled[entry.pending.is_some()] {
                    @if part == Part::Storage { "Inspect the storage of " } @else { "Inspect " }
                    (o.name) " now"
                }
            }
            @match panel.key {
                None if panel.slug == "memberships" => (membership(o)),
                None if panel.slug == "authority" => (authority(view, o, entry, back)),
                None if panel.slug == "storage" => (storage(entry)),
                None if panel.slug == "processes" => (processes(view, o, entry, back)),
                None if panel.slug == "wallet" => (super::wallet::panel(view, o, entry)),
                None => (summary(entry)),
                Some(key) => (observed(entry, key)),
            }
            @if panel.slug == "decisions" {
                @if let Some(records) = shown(entry).and_then(|ob| ob.get("decision_records")) {
                    h4 { "Decisions kept at " (o.name) ": Open, ballots, gate, applied receipt" }
                    p { "History, never a fresh permission. Every signature was checked by " (checker(o)) " when it was inspected, with the keys its policies installed for each signer; " code { "chain" } " says whether each document names the ones before it." }
                    (table(Some(records), None))
                }
            }
            @if panel.slug == "routes" {
                @if let Some(deliveries) = shown(entry).and_then(|ob| ob.get("deliveries")) {
                    h4 { "At " (o.name) ": positions, receipts and values owed per destination" }
                    (table(Some(deliveries), None))
                }
                @if let Some(receipts) = shown(entry).and_then(|ob| ob.get("receipts")) {
                    h4 { "The newest receipt of each destination of the routes " (o.name) " publishes" }
                    p { "Each signature checked by " (checker(o)) " when it was inspected, with the keys the route installed for its destination." }
                    (table(Some(receipts), None))
                }
            }
        }
    }
}

fn state(now: SystemTime, entry: &Entry) -> Markup {
    let age = entry.at.map(|at| (ago(now, at), stamp(at)));
    html! {
        p.state {
            @match (&entry.known, &age) {
                (Known::Never, _) => {
                    strong { "Never inspected" } " since this host started: nothing is known of this owner."
                }
                (Known::Retained, Some((s, at))) => {
                    strong { "Retained" } ", observed " span data-age-s=(s) { (s) " s" } " ago (" time datetime=(at) { (at) } "). "
                    "The owner may have changed since; this page never asks it by itself."
                }
                (Known::Uncertain, Some((s, _))) => {
                    strong { "Uncertain" } ": a reply arrived " span data-age-s=(s) { (s) " s" } " ago, after the panel that asked was closed. Inspect again to know."
                }
                (Known::Uncertain, None) => {
                    strong { "Uncertain" } ": the inspection ended after the panel that asked was closed, with no reply. Inspect again to know."
                }
                (Known::Unreachable { reason }, _) => {
                    strong { "Unreachable" } ": the last inspection got no reply (" (capped(reason)) "). What the owner holds now is unknown."
                }
                (Known::Kept, Some((s, at))) => {
                    strong { "Retained before this host restarted" } ", observed " span data-age-s=(s) { (s) " s" } " ago (" time datetime=(at) { (at) } "), its signed record verified at this start. "
                    "The owner may have changed since; this page never asks it by itself."
                }
                (Known::Damaged { reason }, _) => {
                    strong { "Damaged" } ": " (capped(reason)) ". Nothing of it is shown; inspect the owner to know."
                }
                (Known::Retained | Known::Kept, None) => { strong { "Unknown" } }
            }
            @if let Some((_, asked)) = entry.pending {
                " " em { "An inspection is under way (asked " (ago(now, asked)) " s ago)." }
            }
        }
    }
}

/// Who checked the signatures an owner's inspection shows: this host itself, or the
/// owner (as it reported them: this host did not check them again).
fn checker(o: &OwnerLine) -> Markup {
    html! {
        @if o.membership.is_some() {
            (o.name) " itself (as it reported; this host did not check them again)"
        } @else {
            "this host"
        }
    }
}

/// The authority panel of one owner: its voters as each reported itself; this host's
/// barriers (another owner's authority is reached through this host's own voters).
fn authority(view: &View, o: &OwnerLine, entry: &Entry, back: &str) -> Markup {
    if o.membership.is_some() {
        let voters = shown(entry)
            .and_then(|ob| ob.get("authorities"))
            .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()));
        return html! {
            @if let Some(voters) = voters {
                p { "As " (o.name) "'s voters reported to it when it was inspected — retained, not a live quorum:" }
                (table(Some(voters), Some(&["membership", "state", "term", "leader", "voters", "learners", "last_applied"])))
                p { "This page reaches an authority through this host's own voters only: a read barrier goes through the membership's leader from there (the Authority panel of this host)." }
            } @else {
                p { "No authority voter at " (o.name) ", as far as its last retained inspection says." }
            }
        };
    }
    html! {
        @if let Some(voters) = shown(entry).and_then(|ob| ob.get("authorities")) {
            p { "As this host's voters reported when it was inspected — retained, not a live quorum:" }
            (table(Some(voters), Some(&["membership", "state", "term", "leader", "voters", "learners", "last_applied"])))
        }
        @if view.locked {
            p { "Whether a leader holds a quorum is unknown: no read barrier is run while this host's custody is locked." }
        } @else if view.barriers.is_empty() {
            p { "This host runs no authority." }
        }
        @for m in view.barriers {
            (barrier(view, m, back))
        }
    }
}

/// A membership's read barrier: when one was last run through its leader, and what it
/// confirmed — `unknown` when it could not.
fn barrier(view: &View, membership: &str, back: &str) -> Markup {
    let Some(entry) = view.retained.entry(&barrier_subject(membership)) else {
        return html! {};
    };
    let age = entry.at.map(|at| ago(view.now, at));
    let detail = entry
        .observation
        .as_ref()
        .and_then(|b| b.get("detail"))
        .map_or_else(String::new, cell);
    html! {
        div.barrier data-membership=(membership) data-state=(entry.known.word()) data-pending=(entry.pending.is_some()) {
            h4 { "Read barrier of " (membership) }
            p {
                @match (&entry.known, age) {
                    (Known::Retained, Some(s)) => {
                        strong { "ok" } ", " span data-age-s=(s) { (s) " s" } " ago: " (detail) ". The leader may have changed since."
                    }
                    (Known::Unreachable { reason }, _) => {
                        strong { "unknown" } ": " (capped(reason)) ". Whether the leader this host believes in holds a quorum is unknown."
                    }
                    (Known::Uncertain, _) => {
                        strong { "uncertain" } ": its answer came after the panel that asked was closed. Run it again to know."
                    }
                    _ => {
                        strong { "never run" } " since this host started: whether the leader this host believes in holds a quorum is unknown."
                    }
                }
                @if let Some((_, asked)) = entry.pending {
                    " " em { "A barrier is under way (asked " (ago(view.now, asked)) " s ago)." }
                }
            }
            form method="post" action="/barrier" {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="membership" value=(membership);
                input type="hidden" name="back" value=(back);
                input type="hidden" name="asker" value="";
                button type="submit" disabled[entry.pending.is_some()] { "Read barrier of " (membership) " now" }
            }
        }
    }
}

/// The Processes panel of one owner: its served Processes and runs as its last
/// inspection found them; of this host, also one request asked explicitly.
fn processes(view: &View, o: &OwnerLine, entry: &Entry, back: &str) -> Markup {
    let held = shown(entry).and_then(|ob| ob.get("processes"));
    let Some(run) = view.retained.entry(&Part::Run.subject(o.name)) else {
        return html! {
            (held_runs(o, held))
            p { "One request is inspected at its own host: open " (o.name) "'s control plane." }
        };
    };
    let asked = shown(run);
    let request = asked
        .and_then(|a| a.get("request"))
        .map_or_else(String::new, cell);
    html! {
        (held_runs(o, held))
        div.run data-state=(run.known.word()) data-pending=(run.pending.is_some()) {
            h4 { "One request" }
            (state(view.now, run))
            @if let Some(asked) = asked {
                @match asked.get("run") {
                    Some(serde_json::Value::Null) | None => {
                        p { "This host holds nothing of request " code { (request) } ": it never received or sent it." }
                    }
                    Some(found) => {
                        p { "Request " code { (request) } ":" }
                        (table(Some(&serde_json::Value::Array(vec![found.clone()])), None))
                    }
                }
            }
            form method="post" action="/inspect" {
                input type="hidden" name="csrf" value=(view.csrf);
                input type="hidden" name="owner" value=(o.name);
                input type="hidden" name="part" value=(Part::Run.word());
                input type="hidden" name="back" value=(back);
                input type="hidden" name="asker" value="";
                label for="request" { "Request id" }
                " "
                input type="text" id="request" name="request" required maxlength=(crate::limits::OPERATION_ID_LENGTH_MAX);
                " "
                button type="submit" disabled[run.pending.is_some()] { "Inspect this request now" }
            }
        }
    }
}

/// What an owner's Processes room held at its last inspection.
fn held_runs(o: &OwnerLine, held: Option<&serde_json::Value>) -> Markup {
    let Some(held) = held else {
        return html! {};
    };
    html! {
        dl {
            dt { "Served" } dd { (held.get("served").map_or_else(|| "—".to_owned(), cell)) }
            dt { "Mailbox deposits held" } dd { (held.get("mailbox_deposits").map_or_else(|| "—".to_owned(), cell)) }
        }
        h4 { "Runs by outcome" }
        (table(held.get("runs").map(|r| serde_json::Value::Array(vec![r.clone()])).as_ref(), None))
        h4 { "Runs received at " (o.name) " and not finished (" (held.get("unfinished_count").map_or_else(|| "—".to_owned(), cell)) ")" }
        p { "Running, or unknown: an unknown run holds its units until its operator resolves it (" code { "gridctl process resolve" } "); nothing here resolves it." }
        (table(held.get("unfinished"), Some(&["request", "process", "caller", "outcome", "detail"])))
        h4 { "Runs " (o.name) " sent that have no outcome yet" }
        (table(held.get("open_waits"), Some(&["request", "process", "receiver", "via", "outcome", "detail"])))
    }
}

/// An owner's storage (`Call::Storage`), as its last storage inspection found it.
fn storage(entry: &Entry) -> Markup {
    let Some(view) = shown(entry) else {
        return html! {};
    };
    let scalar = |key: &str| view.get(key).map_or_else(|| "—".to_owned(), cell);
    html! {
        dl {
            dt { "Disk" } dd { (scalar("disk")) }
            dt { "Store journal (bytes)" } dd { (scalar("journal_bytes")) }
            dt { "Acknowledged writes" } dd { (scalar("acknowledged_writes")) }
            dt { "Archive" } dd { (scalar("archive")) }
        }
        @for (title, key) in [("Journals", "journals"), ("Keyspaces", "keyspaces"), ("Checkpoints", "checkpoints"), ("Directories", "directories")] {
            h4 { (title) }
            (table(view.get(key), None))
        }
    }
}

fn membership(o: &OwnerLine) -> Markup {
    html! {
        dl {
            dt { "Membership" } dd { (o.membership.unwrap_or("— (this host, in its own process)")) }
            dt { "Address" } dd { (o.address.unwrap_or("—")) }
        }
    }
}

/// The overview: what each part of the observation counts.
fn summary(entry: &Entry) -> Markup {
    let Some(observation) = shown(entry) else {
        return html! {};
    };
    let profiles = observation
        .get("profiles")
        .and_then(|p| p.as_array())
        .map(|p| p.iter().map(cell).collect::<Vec<_>>().join(" "));
    html! {
        dl {
            dt { "Profiles" } dd { (profiles.unwrap_or_else(|| "—".to_owned())) }
            dt { "Signing key" } dd { (observation.get("keys").and_then(|k| k.get("signing")).map_or_else(|| "—".to_owned(), cell)) }
            @for p in PANELS {
                @if let Some(key) = p.key {
                    dt { (p.title) }
                    dd { (observation.get(key).and_then(|v| v.as_array()).map_or(0, Vec::len)) }
                }
            }
        }
    }
}

/// The observation a panel may draw: the retained or uncertain one; after a failed
/// inspection none (the old one only behind a disclosure, marked as old).
pub(super) fn shown(entry: &Entry) -> Option<&serde_json::Value> {
    match entry.known {
        Known::Retained | Known::Uncertain | Known::Kept => entry.observation.as_ref(),
        Known::Never | Known::Unreachable { .. } | Known::Damaged { .. } => None,
    }
}

fn observed(entry: &Entry, key: &str) -> Markup {
    let part = |observation: &serde_json::Value| match key {
        "decisions" => observation.get(key).map(policies),
        "routes" => observation.get(key).map(routes),
        _ => observation.get(key).cloned(),
    };
    match (shown(entry), &entry.known, &entry.observation) {
        (Some(observation), _, _) => table(part(observation).as_ref(), None),
        (None, Known::Unreachable { .. }, Some(old)) => html! {
            details {
                summary { "The last value retained before the failed inspection (old, not current)" }
                (table(part(old).as_ref(), None))
            }
        },
        _ => html! {},
    }
}

/// Installed routes as rows: each destination by name and address (its keys aside).
fn routes(installed: &serde_json::Value) -> serde_json::Value {
    let rows = installed
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let mut row = r.clone();
            let destinations: Vec<String> = r
                .get("destinations")
                .and_then(|d| d.as_array())
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|d| {
                    let name = d.get("host").and_then(|h| h.as_str()).unwrap_or_default();
                    let address = d
                        .get("address")
                        .and_then(|a| a.as_str())
                        .unwrap_or_default();
                    let retired =
                        d.get("retired").and_then(serde_json::Value::as_bool) == Some(true);
                    format!(
                        "{name} ({address}){}",
                        if retired { ", retired" } else { "" }
                    )
                })
                .collect();
            if let Some(fields) = row.as_object_mut() {
                fields.insert("destinations".to_owned(), destinations.join("; ").into());
            }
            row
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// Installed decision policies as rows: what each fixes, its signers' keys aside.
fn policies(installed: &serde_json::Value) -> serde_json::Value {
    let rows = installed
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|d| {
            let policy = d.get("policy").cloned().unwrap_or_default();
            let field = |k: &str| policy.get(k).cloned().unwrap_or_default();
            serde_json::json!({
                "policy": field("name"),
                "roster": field("roster"),
                "threshold": field("threshold"),
                "gate": field("gate"),
                "effect": field("effect"),
                "expires_after_hours": field("expires_after_hours"),
                "owner": d.get("owner").and_then(|o| o.get("name")),
                "membership": d.get("membership"),
                "signers' keys installed": d.get("keys").and_then(|k| k.as_object()).map(|k| k.keys().cloned().collect::<Vec<_>>().join(", ")),
            })
        })
        .collect();
    serde_json::Value::Array(rows)
}

/// Items of one part of an observation as a table: a column per field (`columns`, or
/// the first CONTROL_PANEL_COLUMNS_MAX seen), at most CONTROL_PANEL_ROWS_MAX rows.
pub(super) fn table(items: Option<&serde_json::Value>, columns: Option<&[&str]>) -> Markup {
    let items: &[serde_json::Value] = items.and_then(|v| v.as_array()).map_or(&[], Vec::as_slice);
    if items.is_empty() {
        return html! { p.empty { "None." } };
    }
    let chosen = columns.is_some();
    let mut columns: Vec<&str> = columns.map(<[&str]>::to_vec).unwrap_or_default();
    for item in items.iter().take(CONTROL_PANEL_ROWS_MAX) {
        if chosen {
            break;
        }
        if let Some(fields) = item.as_object() {
            for k in fields.keys() {
                if !columns.contains(&k.as_str()) && columns.len() < CONTROL_PANEL_COLUMNS_MAX {
                    columns.push(k);
                }
            }
        }
    }
    let rows = items.len().min(CONTROL_PANEL_ROWS_MAX);
    html! {
        table {
            thead { tr { @for c in &columns { th scope="col" { (c) } } } }
            tbody {
                @for item in &items[..rows] {
                    tr {
                        @for c in &columns {
                            td { (item.get(*c).map_or_else(String::new, cell)) }
                        }
                    }
                }
            }
        }
        @if items.len() > rows {
            p { (items.len() - rows) " more not shown (CONTROL_PANEL_ROWS_MAX is " (CONTROL_PANEL_ROWS_MAX) ")." }
        }
    }
}

/// A page for an address that is none of the panels.
pub fn not_found(path: &str) -> String {
    let path = grid_spec::diagnostic::quoted(path);
    html! {
        (DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "Not found · Grid control plane" } link rel="stylesheet" href="/assets/style.css"; }
            body {
                main {
                    h1 { "No panel at " code { (path) } }
                    p { a href="/panel/overview" { "The owners" } }
                }
            }
        }
    }
    .into_string()
}

/// The script and the style sheet, served by the host itself (no CDN, no build step).
pub const SCRIPT: &str = include_str!("assets/app.js");
pub const STYLE: &str = include_str!("assets/style.css");
