//! The control plane's HTML, rendered on the host from what it retained (maud: every
//! value escaped). Nothing here does IO: a page is a pure function of the retained
//! observations, the owners the files name and the time.

use std::time::{Duration, SystemTime};

use maud::{DOCTYPE, Markup, html};

use super::retained::{Entry, Known, Part, Retained, barrier_subject, surrender_subject};
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
        about: "The Processes this host serves and its runs by outcome, as its last inspection found them, and one request inspected when asked — read only: nothing here resumes, resolves or replaces a run.",
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
}

fn query(selected: Option<&str>) -> String {
    selected.map_or_else(String::new, |o| {
        format!(
            "?owner={}",
            url::form_urlencoded::byte_serialize(o.as_bytes()).collect::<String>()
        )
    })
}

fn ago(now: SystemTime, then: SystemTime) -> u64 {
    now.duration_since(then).unwrap_or(Duration::ZERO).as_secs()
}

fn stamp(t: SystemTime) -> String {
    let t = time::OffsetDateTime::from(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// A value as one short line, capped at CONTROL_CELL_CHARS_MAX characters.
fn cell(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::Null => "—".to_owned(),
        serde_json::Value::String(s) => capped(s),
        other => capped(&other.to_string()),
    }
}

/// `text`, capped at CONTROL_CELL_CHARS_MAX characters.
fn capped(text: &str) -> String {
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
                None if panel.slug == "wallet" => (wallet(view, o, entry)),
                None => (summary(entry)),
                Some(key) => (observed(entry, key)),
            }
            @if panel.slug == "routes" && o.membership.is_none() {
                @if let Some(deliveries) = shown(entry).and_then(|ob| ob.get("deliveries")) {
                    h4 { "At this host: positions, receipts and values owed per destination" }
                    (table(Some(deliveries), None))
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
                (Known::Retained, None) => { strong { "Unknown" } }
            }
            @if let Some((_, asked)) = entry.pending {
                " " em { "An inspection is under way (asked " (ago(now, asked)) " s ago)." }
            }
        }
    }
}

/// The authority panel of one owner: this host's voters and their barriers; of
/// another owner, only whether it runs a voter (asked through this host's own).
fn authority(view: &View, o: &OwnerLine, entry: &Entry, back: &str) -> Markup {
    if o.membership.is_some() {
        let runs = shown(entry)
            .and_then(|ob| ob.get("profiles"))
            .and_then(|p| p.as_array())
            .is_some_and(|p| p.iter().any(|x| x == "authority"));
        return html! {
            p {
                @if runs {
                    (o.name) " runs an authority voter. This page reaches an authority through this host's own voters only: a read barrier there goes through the membership's leader."
                } @else {
                    "No authority voter here, as far as its last retained observation says."
                }
            }
        };
    }
    html! {
        @if let Some(voters) = shown(entry).and_then(|ob| ob.get("authorities")) {
            p { "As this host's voters reported when it was inspected — retained, not a live quorum:" }
            (table(Some(voters), Some(&["membership", "state", "term", "leader", "voters", "learners", "last_applied"])))
        }
        @if view.barriers.is_empty() {
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

/// The Processes panel of one owner: this host's served Processes and runs, and one
/// request asked explicitly; another owner's are asked at its own host.
fn processes(view: &View, o: &OwnerLine, entry: &Entry, back: &str) -> Markup {
    if o.membership.is_some() {
        return html! {
            p { "Processes are inspected at their own host only (a peer's POST /control takes no process call): open " (o.name) "'s control plane." }
        };
    }
    let held = shown(entry).and_then(|ob| ob.get("processes"));
    let Some(run) = view.retained.entry(&Part::Run.subject(o.name)) else {
        return html! {};
    };
    let asked = shown(run);
    let request = asked
        .and_then(|a| a.get("request"))
        .map_or_else(String::new, cell);
    html! {
        @if let Some(held) = held {
            dl {
                dt { "Served" } dd { (held.get("served").map_or_else(|| "—".to_owned(), cell)) }
                dt { "Mailbox deposits held" } dd { (held.get("mailbox_deposits").map_or_else(|| "—".to_owned(), cell)) }
            }
            h4 { "Runs by outcome" }
            (table(held.get("runs").map(|r| serde_json::Value::Array(vec![r.clone()])).as_ref(), None))
        }
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
fn wallet(view: &View, o: &OwnerLine, entry: &Entry) -> Markup {
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
        .filter(|s| s.known == Known::Retained && s.at > entry.at)
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
                (Known::Retained, Some(s), Some(receipt)) => {
                    p { strong { "Surrendered" } ", " span data-age-s=(s) { (s) " s" } " ago: " (cell(receipt.get("detail").unwrap_or(&serde_json::Value::Null))) }
                    (table(Some(&serde_json::Value::Array(vec![receipt.clone()])), Some(&["grant", "issuer", "confirmed", "surrendered", "reserved", "unknown", "signature_verified", "verified_with"])))
                }
                (Known::Unreachable { reason }, _, _) => {
                    p role="alert" { strong { "Not surrendered" } ": " (capped(reason)) }
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
fn shown(entry: &Entry) -> Option<&serde_json::Value> {
    match entry.known {
        Known::Retained | Known::Uncertain => entry.observation.as_ref(),
        Known::Never | Known::Unreachable { .. } => None,
    }
}

fn observed(entry: &Entry, key: &str) -> Markup {
    match (shown(entry), &entry.known, &entry.observation) {
        (Some(observation), _, _) => table(observation.get(key), None),
        (None, Known::Unreachable { .. }, Some(old)) => html! {
            details {
                summary { "The last value retained before the failed inspection (old, not current)" }
                (table(old.get(key), None))
            }
        },
        _ => html! {},
    }
}

/// Items of one part of an observation as a table: a column per field (`columns`, or
/// the first CONTROL_PANEL_COLUMNS_MAX seen), at most CONTROL_PANEL_ROWS_MAX rows.
fn table(items: Option<&serde_json::Value>, columns: Option<&[&str]>) -> Markup {
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
